from __future__ import annotations

from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "projects"
    default_auto_field = "django.db.models.BigAutoField"
