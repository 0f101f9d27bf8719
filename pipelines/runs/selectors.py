from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Count, Max, Prefetch, QuerySet, Sum

from accounts.models import User
from core.selectors import one_or_not_found
from memory.selectors.semantic import memory_sources
from pipelines.events import EventType, PhaseChange
from pipelines.models import (
    ACTIVE_STATUSES,
    WORKING_STATUSES,
    AgentCall,
    PipelineRun,
    RunEvent,
    RunStatus,
    RunTransition,
)
from tasks.models import Task

RUN_NOT_FOUND = "Run not found."
SUBTASK_ORDER_MAX = 32767  # a PositiveSmallIntegerField's largest value on every database


def run_list_for_task(*, task: Task) -> QuerySet[PipelineRun]:
    """Newest first, with what their calls recalled (for ``run_recalled``)."""
    return (
        PipelineRun.objects.filter(task=task)
        .select_related("task__project")
        .order_by("-number")
        .prefetch_related(Prefetch("agent_calls", queryset=_recall_calls(), to_attr=RECALL_CALLS_ATTR))
    )


# --- What a run's agents were given from memory ----------------------------------------------

RECALL_CALLS_ATTR = "recall_calls"


def _recall_calls() -> QuerySet[AgentCall]:
    return AgentCall.objects.only("id", "run_id", "agent", "recalled", "created_at").order_by("created_at", "id")


def run_recalled(*, run: PipelineRun) -> list[dict[str, Any]]:
    """Per agent of the run, in the order they were first called: the memories its calls
    were given (each once, with its best score and how many calls had it, best first) and
    its notes as the latest call had them (``{"agent_id", "chars", "cut", "given", "project_id"}`` or None).
    Each memory says where it came from (``memory_sources``)."""
    calls = getattr(run, RECALL_CALLS_ATTR, None)
    if calls is None:
        calls = list(_recall_calls().filter(run=run))
    agents: dict[str, dict[str, Any]] = {}
    for call in calls:
        recalled = call.recalled if isinstance(call.recalled, dict) else {}
        if not recalled:
            continue  # a call made before recall existed, or one given nothing (the distiller)
        entry = agents.setdefault(call.agent, {"agent": call.agent, "memories": {}, "notes": None, "calls": 0})
        entry["calls"] += 1
        for memory in recalled.get("memories") or []:
            if not isinstance(memory, dict) or "id" not in memory:
                continue
            seen = entry["memories"].setdefault(memory["id"], {**memory, "calls": 0})
            seen["calls"] += 1
            seen["score"] = max(seen.get("score") or 0, memory.get("score") or 0)
        if "notes" in recalled:
            entry["notes"] = recalled["notes"]
    # Where each memory came from, as it is now (a person may have deleted it since).
    given = {memory_id for entry in agents.values() for memory_id in entry["memories"]}
    sources = memory_sources(owner_id=run.task.project.owner_id, memory_ids=given) if given else {}
    return [
        {
            **entry,
            "memories": sorted(
                ({**memory, **sources.get(memory["id"], {"deleted": True})} for memory in entry["memories"].values()),
                key=lambda m: (-(m.get("score") or 0), m["id"]),
            ),
        }
        for entry in agents.values()
    ]


def run_names(run_ids: list[int]) -> dict[int, str]:
    """How the pages name runs: "run 2 of task #7" (a run's number counts within its task)."""
    return {
        pk: f"run {number} of task #{task_id}"
        for pk, number, task_id in PipelineRun.objects.filter(pk__in=run_ids).values_list("pk", "number", "task_id")
    }


def run_get_for_user(*, user: User, run_id: object) -> PipelineRun:
    """The user's run, or NotFound — also when it exists but is someone else's."""
    runs = PipelineRun.objects.select_related("task__project").filter(task__project__owner=user)
    return one_or_not_found(runs, run_id, RUN_NOT_FOUND)


def run_latest_for_task(*, task: Task) -> PipelineRun | None:
    return PipelineRun.objects.filter(task=task).order_by("-number").first()


def run_active_for_task(*, task: Task) -> PipelineRun | None:
    return PipelineRun.objects.filter(task=task, status__in=ACTIVE_STATUSES).first()


def run_allowed_actions(*, run: PipelineRun) -> list[str]:
    """What a person can do with the run now (buttons, API)."""
    actions = []
    if run.status in ACTIVE_STATUSES:
        actions.append("cancel")
    if run.status in (RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.AWAITING_APPROVAL):
        actions.append("retry")
    if run.status == RunStatus.AWAITING_APPROVAL:
        actions += ["request_changes", "approve"]
    if run.branch and not run.branch_discarded_at:
        actions.append("download_patch")
        if run.status not in ACTIVE_STATUSES:
            actions.append("discard_branch")
    return actions


def run_subtask_index(*, run: PipelineRun, order: object) -> int | None:
    """Where the plan's subtask ``order`` is in the plan (0-based), or None."""
    if isinstance(order, bool) or not isinstance(order, int) or not 0 <= order <= SUBTASK_ORDER_MAX:
        return None  # PipelineRun.current_subtask holds no other
    for index, subtask in enumerate(run.plan or []):
        if isinstance(subtask, dict) and subtask.get("order") == order:
            return index
    return None


def run_events(*, task: Task, after_id: int = 0, limit: int = 5000) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(task=task, id__gt=after_id).order_by("id")[:limit]


# --- Task page: the pipeline panel ---------------------------------------------------------

# The agents in pipeline order: one log pane each on the task page.
LOG_AGENTS = ("planner", "environment", "coder", "verifier", "reviewer")
# The agent working in each working status (its pane is the live one).
AGENT_FOR_PHASE: dict[str, str] = {
    RunStatus.PLANNING: "planner",
    RunStatus.PREPARING: "environment",
    RunStatus.CODING: "coder",
    RunStatus.FIXING: "coder",
    RunStatus.VERIFYING: "verifier",
    RunStatus.REVIEWING: "reviewer",
}


@dataclass(frozen=True)
class TranscriptSegment:
    """What an agent wrote during one phase of a run (one call, with its retries)."""

    run_id: int | None
    run_number: int | None
    # The id of the phase-change event that began the phase (0 if none was recorded).
    phase_event_id: int
    label: str
    text: str


@dataclass
class TaskTranscript:
    """Every agent's persisted log for a task, per phase, and the id of the newest event
    of any type that was read: a page built from this resumes its socket after it."""

    agents: dict[str, list[TranscriptSegment]]
    last_event_id: int
    # The phase-change event the next chunks belong to (a live page continues it), and its label.
    phase_event_id: int
    phase_label: str


def phase_label(status: str, iteration: int, *, run_number: int | None = None) -> str:
    """How a log pane titles an agent's output in a phase (of run ``run_number``, when
    the task has had more than one)."""
    if status == RunStatus.REVIEWING:
        label = f"Review {iteration + 1}"
    elif status == RunStatus.FIXING:
        label = f"Fixing after review {iteration}"
    else:
        label = str(RunStatus(status).label) if status in RunStatus.values else status
    return f"Run {run_number} · {label}" if run_number else label


def run_phase_change_event(*, run: PipelineRun) -> PhaseChange:
    """The ``phase-change`` event for the status ``run`` is in now: the task page takes
    the phase's label and working agent from it, the board the ``task_id``."""
    return PhaseChange(
        phase=str(run.phase),
        status=str(run.status),
        iteration=run.iteration,
        run_id=run.pk,
        task_id=run.task_id,
        # From the second run on, a new phase is titled with its run's number.
        label=phase_label(run.status, run.iteration, run_number=run.number if run.number > 1 else None),
        agent=AGENT_FOR_PHASE.get(run.status, ""),
    )


def run_transcript_for_task(*, task: Task) -> TaskTranscript:
    """Concatenate the task's ``agent-log`` chunks per agent, split by the phase (and
    run) they were written in, in order.

    The newest event id is read first and only events up to it are used, so an event
    written meanwhile is not half-shown: the socket replays everything after it.
    """
    last_id = RunEvent.objects.filter(task=task).aggregate(last=Max("id"))["last"] or 0
    rows = (
        RunEvent.objects.filter(task=task, type__in=[EventType.AGENT_LOG, EventType.PHASE_CHANGE], id__lte=last_id)
        .order_by("id")
        .values_list("id", "type", "run_id", "run__number", "data")
    )
    multi_run = PipelineRun.objects.filter(task=task).count() > 1
    phase_id, label = 0, ""
    parts: dict[str, list[tuple[int | None, int | None, int, str, list[str]]]] = {agent: [] for agent in LOG_AGENTS}
    for event_id, event_type, run_id, run_number, data in rows:
        if not isinstance(data, dict):
            continue
        if event_type == EventType.PHASE_CHANGE:
            status = str(data.get("status", ""))
            if status in WORKING_STATUSES:
                value = data.get("iteration")
                iteration = value if isinstance(value, int) else 0
                phase_id, label = event_id, phase_label(status, iteration, run_number=run_number if multi_run else None)
            continue
        agent, chunk = data.get("agent"), data.get("chunk")
        if not isinstance(agent, str) or not isinstance(chunk, str) or not chunk:
            continue
        segments = parts.setdefault(agent, [])
        if not segments or segments[-1][2] != phase_id or segments[-1][0] != run_id:
            segments.append((run_id, run_number, phase_id, label, []))
        segments[-1][4].append(chunk)
    agents = {
        agent: [TranscriptSegment(run, number, key, text, "".join(chunks)) for run, number, key, text, chunks in items]
        for agent, items in parts.items()
    }
    return TaskTranscript(agents=agents, last_event_id=last_id, phase_event_id=phase_id, phase_label=label)


def run_totals_for_task(*, task: Task) -> dict[str, Any]:
    """What all of a task's runs cost together: ``{"runs", "cost_usd", "input_tokens", "output_tokens"}``."""
    totals = PipelineRun.objects.filter(task=task).aggregate(
        runs=Count("id"),
        cost_usd=Sum("cost_usd"),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
    )
    return {
        "runs": totals["runs"] or 0,
        "cost_usd": totals["cost_usd"] or Decimal("0"),
        "input_tokens": totals["input_tokens"] or 0,
        "output_tokens": totals["output_tokens"] or 0,
    }


def run_changes_requested(*, run: PipelineRun) -> bool:
    """Whether a person has requested changes on the run (with feedback, line comments or both)."""
    return RunTransition.objects.filter(
        run=run, from_status=RunStatus.AWAITING_APPROVAL, to_status=RunStatus.CODING
    ).exists()


def task_spend(*, task_id: int) -> Decimal:
    """What the task's runs have cost together, every round of every run (the sum
    ``Task.total_cost`` keeps for the board, read from the runs themselves)."""
    total = PipelineRun.objects.filter(task_id=task_id).aggregate(total=Sum("cost_usd"))["total"]
    return Decimal(total or 0)


def run_stopped_in(*, run: PipelineRun) -> str:
    """The status a failed or cancelled run was in when it stopped ('' if unknown)."""
    status = (
        RunTransition.objects.filter(run=run, to_status=run.status)
        .order_by("-created_at", "-id")
        .values_list("from_status", flat=True)
        .first()
    )
    if status == RunStatus.PAUSED:
        return str(run.phase)
    return status or ""
