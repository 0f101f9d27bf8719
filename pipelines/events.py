"""Live events: typed payloads, persisted in order, sent to websocket groups on commit.

Every event is ``{"type": ..., "data": {...}}`` (docs/ARCHITECTURE.md, Live events). Each
type's ``data`` is one class below: a frozen dataclass that refuses an unknown field or a
value of the wrong type when it is built, so a payload cannot drift from what the API and
the pages read. An event is stored as a RunEvent first — its id is the sequence number a
reloaded page or an SSE client resumes from — and then sent to the task's group (and the
board's, for the types the board follows) on commit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from django.db import transaction
from django.utils import timezone

from core import live
from core.payloads import Payload
from pipelines.models import RunEvent

if TYPE_CHECKING:
    from pipelines.models import PipelineRun
    from tasks.models import Task

logger = logging.getLogger(__name__)


class EventType(StrEnum):
    AGENT_LOG = "agent-log"
    PHASE_CHANGE = "phase-change"
    TASK_STATUS = "task-status"
    ERROR = "error"
    PIPELINE_COMPLETE = "pipeline-complete"
    RUN_UPDATE = "run-update"
    SUBTASK_CHANGE = "subtask-change"
    PULL_REQUEST = "pull-request"
    RUN_MESSAGE = "run-message"


@dataclass(frozen=True, kw_only=True)
class Event(Payload):
    """An event's ``data``. ``event_type`` names it on the wire; ``board``: the project
    board's group gets it too (each such event names its ``task_id``)."""

    event_type: ClassVar[EventType]
    board: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True)
class AgentLog(Event):
    """An agent's streamed output, coalesced (``AgentLogStream``)."""

    event_type = EventType.AGENT_LOG
    agent: str
    chunk: str


@dataclass(frozen=True, kw_only=True)
class PhaseChange(Event):
    """The run's status changed. ``label`` is how the task page titles the output of the
    phase that begins (``pipelines.runs.selectors.phase_label``, with the run's number
    from the second run on); ``agent`` the agent working in it ('' if none)."""

    event_type = EventType.PHASE_CHANGE
    board = True
    phase: str
    status: str
    iteration: int
    run_id: int
    task_id: int
    label: str
    agent: str


@dataclass(frozen=True, kw_only=True)
class TaskStatusChange(Event):
    """The pipeline moved the task's card to another column."""

    event_type = EventType.TASK_STATUS
    board = True
    task_id: int
    new_status: str
    old_status: str


@dataclass(frozen=True, kw_only=True)
class RunError(Event):
    """The run paused (``retryable``) or failed."""

    event_type = EventType.ERROR
    type: str
    message: str
    retryable: bool


@dataclass(frozen=True, kw_only=True)
class PipelineComplete(Event):
    event_type = EventType.PIPELINE_COMPLETE
    board = True
    task_id: int
    result: str
    run_id: int


@dataclass(frozen=True, kw_only=True)
class RunUpdate(Event):
    """What the run has used so far (``cost_usd`` a decimal string)."""

    event_type = EventType.RUN_UPDATE
    board = True
    run_id: int
    task_id: int
    input_tokens: int
    output_tokens: int
    cost_usd: str


@dataclass(frozen=True, kw_only=True)
class SubtaskChange(Event):
    """The Coder began a subtask of the plan (its ``start_subtask`` tool)."""

    event_type = EventType.SUBTASK_CHANGE
    run_id: int
    order: int
    position: int
    count: int
    title: str


@dataclass(frozen=True, kw_only=True)
class PullRequestChange(Event):
    event_type = EventType.PULL_REQUEST
    board = True
    task_id: int
    run_id: int
    number: int
    url: str
    state: str


@dataclass(frozen=True, kw_only=True)
class RunMessageChange(Event):
    """A person's message to the run was sent (``delivered`` false) or read by the Coder."""

    event_type = EventType.RUN_MESSAGE
    run_id: int
    message_id: int
    delivered: bool


EVENT_CLASSES: dict[EventType, type[Event]] = {
    cls.event_type: cls
    for cls in (
        AgentLog,
        PhaseChange,
        TaskStatusChange,
        RunError,
        PipelineComplete,
        RunUpdate,
        SubtaskChange,
        PullRequestChange,
        RunMessageChange,
    )
}


# The message type consumers implement a handler for (``event_message``).
CONSUMER_MESSAGE_TYPE = "event.message"


def task_group(task_id: int) -> str:
    return f"task-{task_id}"


def project_group(project_id: int) -> str:
    return f"project-{project_id}"


def now_iso() -> str:
    return timezone.now().isoformat()


def as_message(event: RunEvent) -> dict[str, Any]:
    return {"id": event.pk, "type": event.type, "data": event.data}


SEND_FAILURE_TRACEBACK_EVERY_SECONDS = 60.0
_last_traceback_at = -SEND_FAILURE_TRACEBACK_EVERY_SECONDS

Send = tuple[str, dict[str, Any]]


def _group_send(sends: list[Send]) -> None:
    """Each (group, channel-layer message), all in one hop to the channel layer's loop."""
    try:
        failures = live.group_send_many(sends)
    except Exception as exc:  # noqa: BLE001 - logged below, per send
        failures = [exc] * len(sends)
    for (group, message), failure in zip(sends, failures, strict=True):
        if failure is None:
            continue
        # Live delivery is best effort: the event is persisted and a page catches up
        # from the database when it reconnects. While the layer is down this happens
        # for every flush (~20 a second): the traceback once a minute is enough.
        global _last_traceback_at
        now = time.monotonic()
        verbose = now - _last_traceback_at > SEND_FAILURE_TRACEBACK_EVERY_SECONDS
        if verbose:
            _last_traceback_at = now
        logger.warning(
            "Could not send %s to %s: %s",
            message["event"].get("type"),
            group,
            failure,
            exc_info=failure if verbose else None,
        )


def _unsaved(task: Task, run: PipelineRun | None, event: Event) -> RunEvent:
    payload = {**event.as_data(), "timestamp": now_iso()}
    return RunEvent(task=task, run=run, type=str(event.event_type), data=payload)


def _sends(stored: RunEvent, task: Task, event: Event) -> list[Send]:
    groups = [task_group(task.pk)]
    if event.board:
        groups.append(project_group(task.project_id))
    # Encoded once: the same message (and JSON text) goes to every group and socket.
    message = live.event_message(CONSUMER_MESSAGE_TYPE, as_message(stored))
    return [(group, message) for group in groups]


def event_publish(*, task: Task, run: PipelineRun | None, event: Event) -> RunEvent:
    """Persist the event and send it to the task's group (and the board's) on commit."""
    stored = _unsaved(task, run, event)
    stored.save(force_insert=True)
    sends = _sends(stored, task, event)
    transaction.on_commit(lambda: _group_send(sends))
    return stored


def events_publish_many(items: list[tuple[Task, PipelineRun | None, Event]]) -> list[RunEvent]:
    """``event_publish`` for each (task, run, event), in order: one INSERT for all of them
    in one transaction, and one hand-over to the channel layer once it committed."""
    rows = [_unsaved(task, run, event) for task, run, event in items]
    with transaction.atomic():
        RunEvent.objects.bulk_create(rows)
        sends = [send for row, (task, _, event) in zip(rows, items, strict=True) for send in _sends(row, task, event)]
        transaction.on_commit(lambda: _group_send(sends))
    return rows


def events_since(*, task: Task, after_id: int = 0, limit: int = 5000) -> list[RunEvent]:
    return list(RunEvent.objects.filter(task=task, id__gt=after_id).order_by("id")[:limit])
