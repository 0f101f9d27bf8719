"""The current project: which board a person is looking at, kept in their session.

Every page shows the project switcher, so the user's projects are read once per
request (one query, cached on the request) and shared by the views and the
``current_project`` context processor.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from accounts.selectors import request_user

from .models import Project
from .selectors import project_list_for_user

SESSION_KEY = "current_project_id"
_CACHE_ATTR = "_autocoder_projects"


def user_projects(request: HttpRequest) -> list[Project]:
    """The signed-in user's projects, oldest first, each with ``task_count``."""
    cached = getattr(request, _CACHE_ATTR, None)
    if cached is None:
        cached = list(project_list_for_user(user=request_user(request)))
        setattr(request, _CACHE_ATTR, cached)
    return cached


def get_current_project(request: HttpRequest) -> Project | None:
    """The project chosen in this session; if none (or it is gone), the default one.

    The list is in the order of ``projects.selectors.project_get_default``, so its
    first element is the default project without another query.
    """
    projects = user_projects(request)
    chosen = request.session.get(SESSION_KEY)
    for project in projects:
        if project.pk == chosen:
            return project
    return projects[0] if projects else None


def set_current_project(request: HttpRequest, project: Project) -> None:
    request.session[SESSION_KEY] = project.pk


def forget_project_cache(request: HttpRequest) -> None:
    """After a view changed the user's projects, read them again."""
    if hasattr(request, _CACHE_ATTR):
        delattr(request, _CACHE_ATTR)


def current_project(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"current_project": get_current_project(request), "projects": user_projects(request)}
