"""The task's card follows its run: which board column it moves to at each transition,
and the task's summary of its latest run (``Task.pipeline_state``: the card's chip, the
API's ``latest_run``), written by ``run_transition`` (pipelines/runs/services.py).
"""

from __future__ import annotations

from typing import Any

from pipelines.models import RUN_CARD_COLUMNS, TASK_STATUS_FOR_RUN, ForgeIssue, PipelineRun, RunStatus
from pipelines.runs.costs import cost_text


def pipeline_state(run: PipelineRun) -> dict[str, Any]:
    """The task's summary of its latest run (``Task.pipeline_state``: the board card's
    chip, the API's ``latest_run``) — and, for a task from a forge's issue, the issue's
    (pipelines.forge_issues keeps it there too), which a new run must not drop."""
    state: dict[str, Any] = {
        "run_id": run.pk,
        "run_number": run.number,
        "status": run.status,
        "phase": run.phase,
        "iteration": run.iteration,
        "cost_usd": cost_text(run.cost_usd),
        # Which provider and model answer its agents (the card says so).
        "provider": run.provider,
        "model": run.model,
        # Which Coder it has (None: a run from before runs recorded it).
        "coder_agent": run.coder_agent,
    }
    issue = ForgeIssue.objects.filter(task_id=run.task_id).first()
    if issue is not None:
        state["forge_issue"] = issue.summary()
    return state


def card_column(*, run: PipelineRun, from_status: str, to_status: str, card_column: str) -> str | None:
    """The board column the task moves to as its run goes to ``to_status`` (None: it stays).

    A run that fails or is cancelled takes its card back to the column it was started
    from, with its chip saying why — except a run that never left the queue (it never
    moved the card) and a card a person has meanwhile taken out of the run's columns.
    """
    if to_status in (RunStatus.FAILED, RunStatus.CANCELLED):
        if from_status == RunStatus.QUEUED or card_column not in RUN_CARD_COLUMNS:
            return None
        return run.started_from_column or None
    return TASK_STATUS_FOR_RUN.get(to_status)
