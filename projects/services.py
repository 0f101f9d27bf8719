from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from core.addresses import EndpointRefused, endpoint_host_check, endpoint_parts
from core.crypto import encrypt_secret
from core.exceptions import ApplicationError

from .models import DEFAULT_PROJECT_NAME, LlmProvider, Project

if TYPE_CHECKING:
    from accounts.models import User

LAST_PROJECT = "You cannot delete your last project: create another one first."
NAME_TAKEN = "You already have a project with this name."
NAME_REQUIRED = "A project needs a name."
BASE_URL_NOT_OPENAI = "A base URL is for an OpenAI-compatible endpoint: choose that provider, or leave it empty."
API_KEY_INVALID = "An API key is one word of at most 500 characters."


class LastProject(ApplicationError):
    code = "last_project"


def _clean_name(name: str) -> str:
    cleaned = " ".join(name.split())
    if not cleaned:
        raise ValidationError({"name": [NAME_REQUIRED]})
    return cleaned


def _endpoint_errors(project: Project) -> dict[str, list[str]]:
    """What is wrong with the project's endpoint. A base URL other than the server's own
    OPENAI_BASE_URL must be http(s) and its host public (or in CLONE_ALLOWED_NETWORKS):
    a project owner must not point the server at an internal service. The provider
    checks it again before every call (a name may resolve elsewhere later)."""
    url = project.llm_base_url
    if not url:
        return {}
    if project.llm_provider != LlmProvider.OPENAI:
        return {"llm_base_url": [BASE_URL_NOT_OPENAI]}
    try:
        endpoint_parts(url)
        if url.rstrip("/") != settings.OPENAI_BASE_URL.rstrip("/"):
            endpoint_host_check(url)
    except EndpointRefused as exc:
        return {"llm_base_url": [str(exc)]}
    return {}


def _save(project: Project) -> Project:
    errors = _endpoint_errors(project)
    if errors:
        raise ValidationError(errors)
    project.full_clean(validate_constraints=False)
    try:
        with transaction.atomic():
            project.save()
    except IntegrityError:
        raise ValidationError({"name": [NAME_TAKEN]}) from None
    return project


LLM_FIELDS = (
    "llm_model",
    "llm_max_tokens",
    "token_budget",
    "instructions",
    "learn_distil",
    "lesson_half_life_hours",
    "runs_at_once",
    "task_spend_ceiling_usd",
    "coder_agent",
    "llm_provider",
    "llm_base_url",
    "planner_model",
    "coder_model",
    "reviewer_model",
)


def project_create(*, owner: User, name: str, description: str = "", **llm_settings: Any) -> Project:
    project = Project(owner=owner, name=_clean_name(name), description=description.strip())
    _set_llm_settings(project, llm_settings)
    return _save(project)


def _set_llm_settings(project: Project, values: dict[str, Any]) -> None:
    """``llm_api_key``: None (or absent) keeps the saved key, "" removes it."""
    values = dict(values)
    api_key = values.pop("llm_api_key", None)
    unknown = set(values) - set(LLM_FIELDS)
    if unknown:
        raise TypeError(f"Unknown project settings: {sorted(unknown)}")
    for field, value in values.items():
        setattr(project, field, value.strip() if isinstance(value, str) else value)
    if api_key is not None:
        api_key = api_key.strip()
        if len(api_key) > 500 or any(ch.isspace() for ch in api_key):
            raise ValidationError({"llm_api_key": [API_KEY_INVALID]})
        project.llm_api_key_encrypted = encrypt_secret(api_key)


def project_create_default(*, owner: User) -> Project:
    return project_create(owner=owner, name=DEFAULT_PROJECT_NAME)


def project_update(
    *, project: Project, name: str | None = None, description: str | None = None, **llm_settings: Any
) -> Project:
    _set_llm_settings(project, llm_settings)
    if name is not None:
        project.name = _clean_name(name)
    if description is not None:
        project.description = description.strip()
    return _save(project)


def project_delete(*, project: Project) -> None:
    """Delete a project with its tasks (and runs); a user always keeps one project."""
    with transaction.atomic():
        # Lock the owner's projects so two concurrent deletes cannot remove the last two.
        owned = list(Project.objects.select_for_update().filter(owner_id=project.owner_id).values_list("pk", flat=True))
        if project.pk not in owned:
            return
        if len(owned) <= 1:
            raise LastProject(LAST_PROJECT)
        project.delete()
