"""Live events: typed payloads, persisted in order, sent to websocket groups on commit.

Every event is ``{"type": ..., "data": {...}}`` (docs/ARCHITECTURE.md, Live events). It is stored as
a RunEvent first — its id is the sequence number a reloaded page or an SSE client
resumes from — and then sent to the task's group (and the board's, for column moves).
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import live
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


def _group_send(groups: list[str], message: dict[str, Any]) -> None:
    for group in groups:
        try:
            live.group_send(group, {"type": CONSUMER_MESSAGE_TYPE, "event": message})
        except Exception as exc:
            # Live delivery is best effort: the event is persisted and a page catches up
            # from the database when it reconnects. While the layer is down this happens
            # for every flush (~20 a second): the traceback once a minute is enough.
            global _last_traceback_at
            now = time.monotonic()
            verbose = now - _last_traceback_at > SEND_FAILURE_TRACEBACK_EVERY_SECONDS
            if verbose:
                _last_traceback_at = now
            logger.warning("Could not send %s to %s: %s", message.get("type"), group, exc, exc_info=verbose)


def event_publish(
    *, task: Task, run: PipelineRun | None, event_type: EventType, data: dict[str, Any], board: bool = False
) -> RunEvent:
    """Persist the event and send it to the task's group (and the board's) on commit."""
    payload = {**data, "timestamp": data.get("timestamp") or now_iso()}
    event = RunEvent.objects.create(task=task, run=run, type=str(event_type), data=payload)
    groups = [task_group(task.pk)]
    if board:
        groups.append(project_group(task.project_id))
    message = as_message(event)
    transaction.on_commit(lambda: _group_send(groups, message))
    return event


def events_since(*, task: Task, after_id: int = 0, limit: int = 5000) -> list[RunEvent]:
    return list(RunEvent.objects.filter(task=task, id__gt=after_id).order_by("id")[:limit])


class AgentLogStream:
    """Coalesces an agent's token chunks into at most one ``agent-log`` event per
    PIPELINE_LOG_FLUSH_SECONDS, so a fast stream does not flood browsers or the table."""

    def __init__(self, *, task: Task, run: PipelineRun, agent: str, on_flush: Any = None) -> None:
        self.task = task
        self.run = run
        self.agent = agent
        self._buffer: list[str] = []
        self._last_flush = 0.0
        self._interval = settings.PIPELINE_LOG_FLUSH_SECONDS
        self._on_flush = on_flush

    def write(self, chunk: str) -> None:
        if not chunk:
            return
        self._buffer.append(chunk)
        if time.monotonic() - self._last_flush >= self._interval:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        chunk = "".join(self._buffer)
        self._buffer.clear()
        self._last_flush = time.monotonic()
        event_publish(
            task=self.task, run=self.run, event_type=EventType.AGENT_LOG, data={"agent": self.agent, "chunk": chunk}
        )
        if self._on_flush is not None:
            self._on_flush()
