"""The Repository page of a project: link or clone, see the checkout's state, change
the settings, unlink. Thin: forms validate, services act, errors go beside fields."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from accounts.selectors import request_user
from core.crypto import decrypt_secret
from core.exceptions import ApplicationError
from core.forms import add_service_errors
from projects.models import Project
from projects.selectors import project_get_for_user

from .environments.selectors import environment_overview
from .environments.services.rebuild import environment_rebuild
from .environments.services.settings import environment_settings_update
from .forms import CloneForm, EnvironmentForm, ForgeForm, LinkForm, SettingsForm, VariableForm
from .models import RepositoryStatus
from .selectors import (
    repository_for_project,
    repository_state,
    repository_suggestion,
    repository_worktrees_disk_usage,
)
from .services.ci import ci_check_names, ci_settings_clean, repository_set_ci
from .services.forge import repository_set_forge
from .services.linking import repository_clone, repository_link, repository_unlink
from .services.settings import repository_update
from .variables import project_variable_delete, project_variable_set, project_variables_list

LINKED = "Repository linked: runs of this project now work on branches of {path}."
CLONING = "Cloning {url}… this page updates when it is done."
SAVED = "Repository settings saved."
FORGE_SAVED = "Pull request settings saved."
ENVIRONMENT_SAVED = "Environment settings saved: the next run prepares its environment with them."
REBUILDING = "Preparing the environment from scratch… this page shows its output as it comes."
UNLINKED = "Repository unlinked. Its files and branches are still on the server."
VARIABLE_SAVED = "Variable {name} saved."
VARIABLE_DELETED = "Variable {name} removed."


def _page(request: HttpRequest, project: Project, status: int = 200, **forms: Any) -> HttpResponse:
    repository = repository_for_project(project=project)
    state = repository_state(repository=repository) if repository else None
    context: dict[str, Any] = {
        "project": project,
        "repository": repository,
        "state": state,
        "worktrees_bytes": repository_worktrees_disk_usage(repository=repository) if repository else 0,
        "suggestion": repository_suggestion(repository=repository) if repository else None,
        "cloning": bool(repository and repository.status == RepositoryStatus.CLONING),
        "link_form": forms.get("link_form") or LinkForm(),
        "clone_form": forms.get("clone_form") or CloneForm(),
        "settings_form": forms.get("settings_form"),
        "forge_form": forms.get("forge_form"),
        "environment_form": forms.get("environment_form"),
        "environment": environment_overview(repository=repository) if repository else None,
        "variables": project_variables_list(project=project),
        "variable_form": forms.get("variable_form") or VariableForm(),
    }
    if repository and context["environment_form"] is None:
        context["environment_form"] = EnvironmentForm(
            initial={"setup_script": repository.setup_script, "tests_network": repository.tests_network}
        )
    if repository and repository.forge_kind and repository.forge_webhook_secret_encrypted:
        # The forge's webhook settings: the owner pastes these in (pull requests' states).
        context["webhook_url"] = request.build_absolute_uri(reverse("api:forge-webhook", args=[repository.pk]))
        context["webhook_secret"] = decrypt_secret(repository.forge_webhook_secret_encrypted)
    if repository and context["forge_form"] is None:
        context["forge_form"] = ForgeForm(
            initial={
                "push_url": repository.push_url_display,
                "forge_kind": repository.forge_kind,
                "forge_api_url": repository.forge_api_url,
                "forge_repository": repository.forge_repository,
                "forge_trusted_commenters": repository.forge_trusted_commenters,
                "forge_trusted_logins": repository.forge_trusted_logins,
                "forge_issue_label": repository.forge_issue_label,
                "forge_issue_assigned": repository.forge_issue_assigned,
                "ci_required_checks": "\n".join(repository.ci_required_checks),
                "ci_fix_rounds_max": repository.ci_fix_rounds_max,
                "merge_when_green": repository.merge_when_green,
                "base_update": repository.base_update,
            }
        )
    if repository and context["settings_form"] is None and state and state.branches:
        context["settings_form"] = SettingsForm(
            branches=state.branches,
            initial={
                "base_branch": repository.base_branch,
                "merge_strategy": repository.merge_strategy,
                "test_command": repository.test_command,
                "base_image": repository.base_image,
            },
        )
    template = "repos/page.html"
    if request.headers.get("HX-Request") and request.GET.get("poll"):
        template = "repos/_environment_state.html" if request.GET.get("poll") == "environment" else "repos/_status.html"
    return render(request, template, context, status=status)


@login_required
@require_GET
def repository_page(request: HttpRequest, project_id: int) -> HttpResponse:
    return _page(request, project_get_for_user(user=request_user(request), project_id=project_id))


@login_required
@require_POST
def repository_link_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    form = LinkForm(request.POST)
    if form.is_valid():
        try:
            repository = repository_link(project=project, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, LINKED.format(path=repository.display_path))
            return redirect("repos:page", project_id=project.pk)
    return _page(request, project, status=400, link_form=form)


@login_required
@require_POST
def repository_clone_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    form = CloneForm(request.POST)
    if form.is_valid():
        try:
            repository = repository_clone(project=project, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.info(request, CLONING.format(url=repository.origin_url))
            return redirect("repos:page", project_id=project.pk)
    return _page(request, project, status=400, clone_form=form)


@login_required
@require_POST
def repository_settings_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    repository = repository_for_project(project=project)
    if repository is None:
        return redirect("repos:page", project_id=project.pk)
    state = repository_state(repository=repository)
    form = SettingsForm(request.POST, branches=state.branches or [repository.base_branch])
    if form.is_valid():
        try:
            repository_update(repository=repository, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, SAVED)
            return redirect("repos:page", project_id=project.pk)
    return _page(request, project, status=400, settings_form=form)


@login_required
@require_POST
def repository_forge_view(request: HttpRequest, project_id: int) -> HttpResponse:
    user = request_user(request)
    project = project_get_for_user(user=user, project_id=project_id)
    repository = repository_for_project(project=project)
    if repository is None:
        return redirect("repos:page", project_id=project.pk)
    form = ForgeForm(request.POST)
    if form.is_valid():
        try:
            data = form.cleaned_data
            ci = {
                "ci_required_checks": ci_check_names(data["ci_required_checks"]),
                "ci_fix_rounds_max": data["ci_fix_rounds_max"],
                "merge_when_green": data["merge_when_green"],
            }
            ci_settings_clean(**ci)  # before anything is saved
            repository_set_forge(
                repository=repository,
                user=user,
                push_url=data["push_url"],
                forge_kind=data["forge_kind"],
                forge_api_url=data["forge_api_url"],
                forge_repository=data["forge_repository"],
                token=form.token_argument(),
                forge_trusted_commenters=data["forge_trusted_commenters"],
                forge_trusted_logins=data["forge_trusted_logins"],
                forge_issue_label=data["forge_issue_label"],
                forge_issue_assigned=data["forge_issue_assigned"],
                base_update=data["base_update"] or None,
            )
            repository_set_ci(repository=repository, **ci)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, FORGE_SAVED)
            return redirect("repos:page", project_id=project.pk)
    return _page(request, project, status=400, forge_form=form)


@login_required
@require_POST
def repository_unlink_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    repository = repository_for_project(project=project)
    if repository is not None:
        repository_unlink(repository=repository)
        messages.success(request, UNLINKED)
    return redirect("repos:page", project_id=project.pk)


@login_required
@require_POST
def repository_environment_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    repository = repository_for_project(project=project)
    if repository is None:
        return redirect("repos:page", project_id=project.pk)
    form = EnvironmentForm(request.POST)
    if form.is_valid():
        try:
            environment_settings_update(repository=repository, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, ENVIRONMENT_SAVED)
            return redirect(reverse("repos:page", args=[project.pk]) + "#environment")
    return _page(request, project, status=400, environment_form=form)


def repository_variable_set_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    form = VariableForm(request.POST)
    if form.is_valid():
        try:
            variable = project_variable_set(project=project, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, VARIABLE_SAVED.format(name=variable.name))
            return redirect(reverse("repos:page", kwargs={"project_id": project.pk}) + "#variables")
    return _page(request, project, status=400, variable_form=form)


@login_required
@require_POST
def repository_environment_rebuild_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    repository = repository_for_project(project=project)
    if repository is None:
        return redirect("repos:page", project_id=project.pk)
    try:
        environment_rebuild(repository=repository)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, REBUILDING)
    return redirect(reverse("repos:page", args=[project.pk]) + "#environment")


def repository_variable_delete_view(request: HttpRequest, project_id: int, name: str) -> HttpResponse:
    project = project_get_for_user(user=request_user(request), project_id=project_id)
    project_variable_delete(project=project, name=name)
    messages.success(request, VARIABLE_DELETED.format(name=name))
    return redirect(reverse("repos:page", kwargs={"project_id": project.pk}) + "#variables")
