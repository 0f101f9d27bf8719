from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, QuerySet

from accounts.models import User
from core.selectors import one_or_not_found

from .models import LlmProvider, Project

PROJECT_NOT_FOUND = "Project not found."


def project_list_for_user(*, user: User) -> QuerySet[Project]:
    return Project.objects.filter(owner=user).annotate(task_count=Count("tasks")).order_by("created_at", "id")


def project_get_for_user(*, user: User, project_id: object) -> Project:
    """The user's project, or NotFound — also when it exists but is someone else's."""
    return one_or_not_found(Project.objects.filter(owner=user), project_id, PROJECT_NOT_FOUND)


def project_get_default(*, user: User) -> Project | None:
    """The project a user lands on: their oldest one."""
    return Project.objects.filter(owner=user).order_by("created_at", "id").first()


def project_task_spend_ceiling(*, project: Project) -> Decimal | None:
    """What one task of ``project`` may spend over all its runs, in USD: the project's own
    ceiling, or the server's (``TASK_SPEND_CEILING_USD``) when it sets none; None when
    there is no ceiling (0 in either place)."""
    own = project.task_spend_ceiling_usd
    ceiling = Decimal(str(settings.TASK_SPEND_CEILING_USD)) if own is None else own
    return ceiling if ceiling > 0 else None


@dataclass(frozen=True)
class ProjectLlm:
    """Who answers a project's agents: ``provider`` "" is the server's LLM_PROVIDER; an
    OpenAI-compatible choice may bring its own endpoint and key ("" = the server's);
    ``model`` "" is the provider's default."""

    provider: str
    base_url: str
    api_key_encrypted: str
    model: str


def project_llm(*, project: Project) -> ProjectLlm:
    own_endpoint = project.llm_provider == LlmProvider.OPENAI
    return ProjectLlm(
        provider=project.llm_provider,
        base_url=project.llm_base_url if own_endpoint else "",
        api_key_encrypted=project.llm_api_key_encrypted if own_endpoint else "",
        model=project.llm_model,
    )
