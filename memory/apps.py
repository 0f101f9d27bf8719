from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Celery autodiscovers only memory.tasks; the chat's tasks live beside it.
        from . import chat_tasks  # noqa: F401
