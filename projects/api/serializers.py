from __future__ import annotations

from rest_framework import serializers

from core.api import StrictCharField
from projects.models import PROJECT_NAME_MAX_LENGTH, Project

_description_max_length = Project._meta.get_field("description").max_length
assert _description_max_length is not None
DESCRIPTION_MAX_LENGTH: int = _description_max_length


class ProjectSerializer(serializers.ModelSerializer[Project]):
    task_count = serializers.IntegerField(read_only=True, help_text="How many tasks the project has.")

    class Meta:
        model = Project
        fields = ("id", "name", "description", "task_count", "created_at", "updated_at")
        read_only_fields = fields


class ProjectInputSerializer(serializers.Serializer):
    """Body of POST (name required) and PATCH (every field optional)."""

    name = StrictCharField(max_length=PROJECT_NAME_MAX_LENGTH, help_text="Trimmed; unique per user, ignoring case.")
    description = StrictCharField(max_length=DESCRIPTION_MAX_LENGTH, allow_blank=True, required=False)
