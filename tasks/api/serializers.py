from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api import StrictCharField
from projects.api.fields import OwnedProjectField
from tasks.models import DESCRIPTION_MAX_LENGTH, TITLE_MAX_LENGTH, Task, TaskCategory, TaskPriority, TaskStatus

STATUS_NOT_EDITABLE = "The status changes only through PATCH /api/tasks/{id}/status."
POSITION_NOT_EDITABLE = "The position changes only through PATCH /api/tasks/{id}/status."
PROJECT_NOT_EDITABLE = "A task cannot move to another project."
SEARCH_MAX_LENGTH = 200


@extend_schema_field({"type": "array", "items": {"type": "object", "additionalProperties": True}})
class SubtasksField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True})
class PipelineStateField(serializers.JSONField):
    pass


class TaskSerializer(serializers.ModelSerializer[Task]):
    project = serializers.IntegerField(source="project_id", read_only=True, help_text="The project's id.")
    subtasks = SubtasksField(
        read_only=True, help_text="Ordered subtasks from the Planner: `{id, title, description, order}`."
    )
    pipeline_state = PipelineStateField(read_only=True, help_text="Summary of the latest pipeline run.")

    class Meta:
        model = Task
        fields = (
            "id",
            "project",
            "title",
            "description",
            "category",
            "priority",
            "status",
            "position",
            "subtasks",
            "pipeline_state",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields


class _TaskFieldsSerializer(serializers.Serializer):
    title = StrictCharField(max_length=TITLE_MAX_LENGTH)
    description = StrictCharField(max_length=DESCRIPTION_MAX_LENGTH, allow_blank=True, required=False)
    category = serializers.ChoiceField(choices=TaskCategory.choices, required=False)
    priority = serializers.ChoiceField(choices=TaskPriority.choices, required=False)


# Needs ``context={"user": ...}`` to resolve ``project`` among the user's own.
class TaskCreateSerializer(_TaskFieldsSerializer):
    project = OwnedProjectField(
        required=False, help_text="One of your projects; by default your first (oldest) project."
    )


class TaskUpdateSerializer(_TaskFieldsSerializer):
    """PATCH body: any of title, description, category, priority."""

    NOT_EDITABLE = {"status": STATUS_NOT_EDITABLE, "position": POSITION_NOT_EDITABLE, "project": PROJECT_NOT_EDITABLE}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # Silently ignoring these would let a client believe the task moved.
        refused = {field: [message] for field, message in self.NOT_EDITABLE.items() if field in self.initial_data}
        if refused:
            raise serializers.ValidationError(refused)
        return attrs


class TaskMoveSerializer(serializers.Serializer):
    """A move to a column, and optionally to a position in it."""

    # DRF and drf-spectacular mark every PATCH body partial (all fields optional); a
    # move without a status means nothing, so this serializer is never partial.
    @property
    def partial(self) -> bool:
        return False

    @partial.setter
    def partial(self, value: bool) -> None:
        pass

    status = serializers.ChoiceField(choices=TaskStatus.choices, help_text="The column to move to.")
    position = serializers.IntegerField(
        min_value=0, required=False, help_text="Index in the target column, from 0 (default: last)."
    )


class TaskListQuerySerializer(serializers.Serializer):
    project = serializers.IntegerField(required=False, help_text="Only this project's tasks (one of yours).")
    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False, help_text="Only this column.")
    category = serializers.ChoiceField(choices=TaskCategory.choices, required=False)
    q = StrictCharField(
        max_length=SEARCH_MAX_LENGTH, required=False, allow_blank=True, help_text="Text in the title or description."
    )
