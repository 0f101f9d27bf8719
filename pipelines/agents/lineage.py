"""A run's lineage: what each agent of a pipeline run was given and what it produced.

Every agent call leaves its input (the prompt, whose parents are the previous phase's
outputs) and its output as context items of the run, and an entry in the agent's daily
log — both through memory's generic services. The run's lineage page (pipelines.views)
and the context API's ``?run=`` list read the items back.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.db import transaction

from accounts.models import User
from core.exceptions import NotFound
from memory.models import ContextItem
from memory.selectors.context import RUN_NOT_FOUND, context_list_for_user
from memory.services.context import context_decode, context_save
from memory.services.notes import daily_log_record
from pipelines.models import PipelineRun
from pipelines.runs.selectors import run_changes_requested, run_get_for_user

logger = logging.getLogger(__name__)

CONTENT_PREVIEW_MAX = 20_000
# A run's calls are the daily log session "run-<id>" (memory links it to the lineage page).
RUN_SESSION_PREFIX = "run-"

# Agent → (input type, output type) of the items a pipeline call leaves behind.
AGENT_ITEM_TYPES: dict[str, tuple[str, str]] = {
    "planner": ("task", "plan"),
    "coder": ("prompt", "changes"),
    "reviewer": ("prompt", "review"),
}


def run_session(run: PipelineRun) -> str:
    """The daily log session of the run's agent calls."""
    return f"{RUN_SESSION_PREFIX}{run.pk}"


# --- Recording ------------------------------------------------------------------------------


def _latest_of_run(run: PipelineRun, type: str) -> ContextItem | None:
    return ContextItem.objects.filter(run_id=run.pk, type=type).order_by("-created_at").first()


def _phase_parents(run: PipelineRun, agent: str) -> list[str]:
    wanted: list[str] = []
    if agent == "coder":
        wanted = ["plan"]
        if run.review_findings or run.feedback or run_changes_requested(run=run):
            wanted.append("review")
    elif agent == "reviewer":
        wanted = ["changes"]
    return [item.pk for name in wanted if (item := _latest_of_run(run, name)) is not None]


def context_record_agent_output(
    *, run: PipelineRun, agent: str, prompt: str, output: dict[str, Any], recalled: dict[str, Any] | None = None
) -> tuple[list[str], str]:
    """Store one successful agent call as an input item (the prompt and what the agent
    recalled, whose parents are the previous phase's outputs) and an output item (the
    tool input). Returns ``(input ids, output id)`` for the daily log."""
    owner = run.task.project.owner
    input_type, output_type = AGENT_ITEM_TYPES.get(agent, ("prompt", agent))
    parents = _phase_parents(run, agent)
    # Run and iteration are part of the content so that two runs never share an item.
    where = {"run": run.pk, "phase": run.status, "iteration": run.iteration}
    input_content: dict[str, Any] = {**where, "prompt": prompt}
    if recalled is not None:
        input_content["recalled"] = recalled
    if agent == "planner":
        input_content.update(title=run.task.title, description=run.task.description)
    input_item, _ = context_save(
        owner=owner,
        run_id=run.pk,
        type=input_type,
        agent_id=agent,
        content=input_content,
        parent_ids=parents,
        metadata={"role": "input", **where},
    )
    output_item, _ = context_save(
        owner=owner,
        run_id=run.pk,
        type=output_type,
        agent_id=agent,
        content={**where, "output": output},
        parent_ids=[*parents, input_item.pk],
        metadata={"role": "output", "input_id": input_item.pk, **where},
    )
    return [input_item.pk, *parents], output_item.pk


def context_record_agent_call(
    *,
    run: PipelineRun,
    agent: str,
    outcome: str,
    prompt: str = "",
    output: dict[str, Any] | None = None,
    duration_ms: int = 0,
    error: str = "",
    daily_log: bool = True,
    recalled: dict[str, Any] | None = None,
) -> None:
    """The orchestrator's one hook into memory: remember a call (its context items when it
    succeeded) and add it to the agent's daily log (``daily_log=False``: a conversation
    whose turns are logged one by one). Never breaks the run: a failure is logged."""
    try:
        with transaction.atomic():
            input_ids: list[str] = []
            output_id = ""
            if outcome == "ok" and output is not None:
                input_ids, output_id = context_record_agent_output(
                    run=run, agent=agent, prompt=prompt, output=output, recalled=recalled
                )
            if not daily_log:
                return
            daily_log_record(
                owner=run.task.project.owner,
                agent_id=agent,
                session=run_session(run),
                type=AGENT_ITEM_TYPES.get(agent, ("", agent))[1],
                input_context_ids=input_ids,
                output_context_id=output_id,
                duration_ms=duration_ms,
                outcome=outcome,
                error=error,
            )
    except Exception:
        logger.exception("Run %s: could not record the %s call in memory", run.pk, agent)


# --- Reading --------------------------------------------------------------------------------


def context_run_get_for_user(*, user: User, run_id: object) -> PipelineRun:
    """The user's run, or NotFound (also when it is someone else's)."""
    try:
        return run_get_for_user(user=user, run_id=run_id)
    except NotFound:
        raise NotFound(RUN_NOT_FOUND) from None


def context_list_for_run(*, user: User, run: PipelineRun) -> list[ContextItem]:
    """The run's items, oldest first (the order the pipeline made them)."""
    return list(context_list_for_user(user=user).filter(run_id=run.pk).order_by("created_at"))


def context_list_for_run_id(*, user: User, run_id: object) -> list[ContextItem]:
    """The items of one of the user's runs: the context API's ``?run=`` list (memory's
    list endpoint asks this through the lister registered in pipelines.apps)."""
    return context_list_for_run(user=user, run=context_run_get_for_user(user=user, run_id=run_id))


def lineage_rows(*, user: User, run: PipelineRun) -> list[dict[str, Any]]:
    """The lineage page's rows: each item with its parents (within the run), its depth
    in the graph and its content, pretty-printed and cut at CONTENT_PREVIEW_MAX."""
    items = context_list_for_run(user=user, run=run)
    by_id = {item.pk: item for item in items}
    depth: dict[str, int] = {}
    rows = []
    for item in items:
        parents = [pk for pk in item.parent_ids or [] if pk in by_id]
        depth[item.pk] = max((depth.get(pk, 0) + 1 for pk in parents), default=0)
        pretty = json.dumps(context_decode(item), indent=2, ensure_ascii=False)
        rows.append(
            {
                "item": item,
                "parents": [by_id[pk] for pk in parents],
                "depth": depth[item.pk],
                "content": pretty[:CONTENT_PREVIEW_MAX],
                "truncated": len(pretty) > CONTENT_PREVIEW_MAX,
            }
        )
    return rows
