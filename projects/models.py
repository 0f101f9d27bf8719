from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower

from core.models import TimeStampedModel

PROJECT_NAME_MAX_LENGTH = 100
DEFAULT_PROJECT_NAME = "My first project"


class Project(TimeStampedModel):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=PROJECT_NAME_MAX_LENGTH)
    description = models.TextField(blank=True, max_length=2000)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint("owner", Lower("name"), name="projects_project_owner_name_ci_unique"),
        ]

    def __str__(self) -> str:
        return self.name
