"""Which Coder a project or task picks: AutoCoder's own (``built-in``, stored empty) or
a coding agent over ACP named in the setting ``ACP_AGENTS`` (llm/acp/provider.py). Read
from settings only, so every app can validate the name (projects, tasks) and show the
choices without knowing the agents' code."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError

BUILT_IN = "built-in"
BUILT_IN_LABEL = "Built-in Coder"
UNKNOWN_CODER_AGENT = "There is no coding agent {name!r}: choose built-in or one of {known}."
CODER_AGENT_MAX_LENGTH = 64


def coder_agent_names() -> list[str]:
    return sorted(settings.ACP_AGENTS)


def coder_agent_choices(*, inherit: str = "") -> list[tuple[str, str]]:
    """(value, label) for a select: ``inherit`` labels the empty value when it means
    "the project's" (a task), else the empty value is the built-in Coder."""
    first = [("", inherit)] if inherit else [("", BUILT_IN_LABEL)]
    agents = [(name, str(settings.ACP_AGENTS[name].get("label") or name)) for name in coder_agent_names()]
    return [*first, *([(BUILT_IN, BUILT_IN_LABEL)] if inherit else []), *agents]


def chosen_coder_agent(*, task_choice: str, project_choice: str) -> str:
    """The ACP agent a task's runs use as their Coder: its own choice, else its
    project's; '' for the built-in one."""
    chosen = task_choice or project_choice
    return "" if chosen == BUILT_IN else chosen


def run_coder_agent(*, recorded: str | None, task_choice: str, project_choice: str) -> str:
    """The ACP agent a run uses as its Coder ('' for the built-in one): the one recorded
    when the run started, so a project switched meanwhile changes its next runs, not this
    one. A run from before runs recorded it (None) has its task's choice as it is now."""
    if recorded is not None:
        return recorded
    return chosen_coder_agent(task_choice=task_choice, project_choice=project_choice)


def coder_agent_label(name: str) -> str:
    if not name or name == BUILT_IN:
        return BUILT_IN_LABEL
    entry = settings.ACP_AGENTS.get(name)
    return str(entry.get("label") or name) if entry else f"{name} (not installed)"


def validate_coder_agent(value: str) -> None:
    """Empty, ``built-in`` or a registered ACP agent."""
    if value in ("", BUILT_IN) or value in settings.ACP_AGENTS:
        return
    known = ", ".join(coder_agent_names()) or "(no ACP agents are configured)"
    raise ValidationError(UNKNOWN_CODER_AGENT.format(name=value, known=known), code="unknown_coder_agent")
