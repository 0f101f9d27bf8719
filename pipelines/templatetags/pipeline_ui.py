"""Presentation filters for pipeline runs (money, token counts, status chips, anchors) and
the task page's pipeline section (``{% run_panel task %}``)."""

from __future__ import annotations

import hashlib
from decimal import Decimal, InvalidOperation
from typing import Any

from django import template
from django.template import Context

from core.coder_agents import coder_agent_label, run_coder_agent
from llm.providers import provider_label
from pipelines.messages.selectors import run_message_note
from pipelines.models import PipelineRun, RunMessage, RunStatus
from pipelines.panel import panel_context
from pipelines.runs.ceiling import TaskSpend
from pipelines.runs.places import queue_place_label
from projects.selectors import project_task_spend_ceiling
from tasks.models import Task

register = template.Library()

STATUS_LABELS = dict(RunStatus.choices)
# Run statuses a board card shows a chip for (an approved run's card is in Done: nothing to add).
CARD_CHIP_STATUSES = frozenset(
    {
        RunStatus.QUEUED,
        RunStatus.PLANNING,
        RunStatus.CODING,
        RunStatus.REVIEWING,
        RunStatus.FIXING,
        RunStatus.AWAITING_APPROVAL,
        RunStatus.PAUSED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    }
)
WORKING = frozenset({RunStatus.PLANNING, RunStatus.CODING, RunStatus.REVIEWING, RunStatus.FIXING})


@register.filter
def usd(value: Any) -> str:
    """'$0.0123': dollars with four decimals (costs of single calls are fractions of a cent)."""
    try:
        amount = Decimal(str(value if value is not None else 0))
    except InvalidOperation:
        return ""
    return f"${amount.quantize(Decimal('0.0001')):,}"


@register.filter
def task_spend(task: Task) -> TaskSpend:
    """A board card's spend against its task's ceiling, from the card's own fields (the
    denormalised ``Task.total_cost``, the task's project): no query per card."""
    return TaskSpend(spent=Decimal(task.total_cost or 0), ceiling=project_task_spend_ceiling(project=task.project))


@register.filter
def task_coder(task: Task) -> str:
    """The card's Coder: the one its latest run has (from the card's summary of it), else
    the one a run would have now (the card's project is already loaded)."""
    return _acp_coder_label((task.pipeline_state or {}).get("coder_agent"), task)


@register.filter
def run_coder(run: PipelineRun) -> str:
    """The run's Coder."""
    return _acp_coder_label(run.coder_agent, run.task)


def _acp_coder_label(recorded: str | None, task: Task) -> str:
    """The label of the coding agent over ACP that is the Coder; '' for the built-in one."""
    chosen = run_coder_agent(recorded=recorded, task_choice=task.coder_agent, project_choice=task.project.coder_agent)
    return coder_agent_label(chosen) if chosen else ""


@register.filter
def thousands(value: Any) -> str:
    """12345 → '12,345'."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return ""


@register.filter
def run_status_label(status: Any) -> str:
    """'awaiting_approval' → 'awaiting approval', as a chip says it."""
    return str(STATUS_LABELS.get(str(status), str(status).replace("_", " "))).lower()


@register.filter
def run_engine(state: Any) -> str:
    """'gpt-4.1 · OpenAI-compatible': who answers a run's agents, from the run or its
    task's ``pipeline_state``."""
    if isinstance(state, dict):
        provider, model = str(state.get("provider") or ""), str(state.get("model") or "")
    else:
        provider, model = str(getattr(state, "provider", "") or ""), str(getattr(state, "model", "") or "")
    return " · ".join(part for part in (model, provider_label(provider) if provider else "") if part)


@register.filter
def card_run_status(pipeline_state: Any) -> str:
    """The run status a board card shows a chip for, or ''."""
    if not isinstance(pipeline_state, dict):
        return ""
    status = str(pipeline_state.get("status") or "")
    return status if status in CARD_CHIP_STATUSES else ""


@register.filter
def queue_place(pipeline_state: Any, places: Any) -> str:
    """'2nd in line' for a card whose run waits queued, else ''. ``places``: the
    page's ``run_queue_places`` (pipelines/context_processors.py), one query a page."""
    if not isinstance(pipeline_state, dict) or pipeline_state.get("status") != RunStatus.QUEUED:
        return ""
    try:
        return queue_place_label(places.get(pipeline_state.get("run_id")))
    except AttributeError:  # a page rendered without the context processor
        return ""


@register.filter
def is_working(status: Any) -> bool:
    return str(status) in WORKING


@register.filter
def file_anchor(path: str) -> str:
    """A stable element id for a file's diff (paths may hold any character)."""
    return "file-" + hashlib.sha1(str(path).encode(), usedforsecurity=False).hexdigest()[:12]


@register.inclusion_tag("pipelines/_section.html", takes_context=True)
def run_panel(context: Context, task: Task) -> dict[str, Any]:
    """The task page's pipeline section: the run panel, the agents' log panes and the diff.

    It sees the page's context (the request, csrf token, messages) with the panel's on top.
    """
    page: dict[Any, Any] = context.flatten()
    return {**page, **panel_context(task=task)}


@register.simple_tag
def line_comments_at(placed: dict[str, dict[tuple[str, int], list[Any]]], path: str, row: Any) -> list[Any]:
    """The pending comments the diff shows under ``row`` of ``path``'s diff
    (panel._pending_by_line): a removed row's by its old line, others' by their new one."""
    side, line = ("old", row.old_line) if row.kind == "del" else ("new", row.new_line)
    if line is None:
        return []
    return (placed or {}).get(path, {}).get((side, line), [])


@register.filter
def message_note(message: RunMessage) -> str:
    """Who read a person's message to the run, or when it will be read."""
    return run_message_note(message=message)
