from __future__ import annotations

from django.db.models import Count, QuerySet

from accounts.models import User
from core.selectors import one_or_not_found

from .models import Project

PROJECT_NOT_FOUND = "Project not found."


def project_list_for_user(*, user: User) -> QuerySet[Project]:
    return Project.objects.filter(owner=user).annotate(task_count=Count("tasks")).order_by("created_at", "id")


def project_get_for_user(*, user: User, project_id: object) -> Project:
    """The user's project, or NotFound — also when it exists but is someone else's."""
    return one_or_not_found(Project.objects.filter(owner=user), project_id, PROJECT_NOT_FOUND)


def project_get_default(*, user: User) -> Project | None:
    """The project a user lands on: their oldest one."""
    return Project.objects.filter(owner=user).order_by("created_at", "id").first()
