"""Project pages: list, create, rename, delete. The switcher itself is in base.html."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from accounts.selectors import request_user
from core.forms import add_service_errors

from . import services
from .context_processors import set_current_project, user_projects
from .forms import ProjectForm
from .selectors import project_get_for_user
from .services import LAST_PROJECT, LastProject


@login_required
@require_GET
def project_list(request: HttpRequest) -> HttpResponse:
    return render(request, "projects/list.html", {"form": ProjectForm()})


@login_required
@require_http_methods(["GET", "POST"])
def project_create(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return render(request, "projects/form.html", {"form": ProjectForm()})
    form = ProjectForm(request.POST)
    if form.is_valid():
        try:
            project = services.project_create(owner=request_user(request), **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            set_current_project(request, project)
            messages.success(request, f"Project “{project.name}” created. Add its first task.")
            return redirect("tasks:board")
    return render(request, "projects/form.html", {"form": form}, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def project_edit(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    if request.method == "GET":
        form = ProjectForm(
            initial={field: getattr(project, field) for field in ("name", "description", *services.LLM_FIELDS)}
        )
        return render(request, "projects/form.html", {"form": form, "project": project})
    form = ProjectForm(request.POST)
    if form.is_valid():
        try:
            services.project_update(project=project, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, f"Project “{project.name}” saved.")
            return redirect("projects:list")
    # The page title should keep the saved name, not the rejected one.
    project.refresh_from_db()
    return render(request, "projects/form.html", {"form": form, "project": project}, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def project_delete(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    if request.method == "POST":
        try:
            services.project_delete(project=project)
        except LastProject as exc:
            messages.error(request, exc.message)
            return redirect("projects:list")
        # If it was the current project, the next page falls back to the default one.
        messages.success(request, f"Project “{project.name}” and its tasks were deleted.")
        return redirect("projects:list")
    projects = user_projects(request)
    context = {
        "project": project,
        "is_last": len(projects) <= 1,
        "task_count": next((p.task_count for p in projects if p.pk == project.pk), 0),  # type: ignore[attr-defined]
        "last_project_message": LAST_PROJECT,
    }
    return render(request, "projects/delete.html", context)
