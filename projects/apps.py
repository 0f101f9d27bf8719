from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "projects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from accounts.signals import user_created

        # Every new user starts with a board, in the transaction that creates the user.
        user_created.connect(project_create_default_for_new_user, dispatch_uid="projects.default_project")


def project_create_default_for_new_user(sender: Any, user: Any, **kwargs: Any) -> None:
    """The receiver of accounts' user_created: ``project_create_default``."""
    from .services import project_create_default

    project_create_default(owner=user)
