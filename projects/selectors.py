from __future__ import annotations

from django.db.models import Count, QuerySet

from accounts.models import User
from core.converters import parse_id
from core.exceptions import NotFound

from .models import Project

PROJECT_NOT_FOUND = "Project not found."


def project_list_for_user(*, user: User) -> QuerySet[Project]:
    return Project.objects.filter(owner=user).annotate(task_count=Count("tasks")).order_by("created_at", "id")


def project_get_for_user(*, user: User, project_id: object) -> Project:
    """The user's project, or NotFound — also when it exists but is someone else's."""
    pk = parse_id(project_id)
    if pk is None:
        raise NotFound(PROJECT_NOT_FOUND)
    project = Project.objects.filter(owner=user, pk=pk).first()
    if project is None:
        raise NotFound(PROJECT_NOT_FOUND)
    return project


def project_get_default(*, user: User) -> Project | None:
    """The project a user lands on: their oldest one."""
    return Project.objects.filter(owner=user).order_by("created_at", "id").first()
