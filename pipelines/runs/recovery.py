"""Resuming a phase whose worker went away: the calls it had already bought, and a
phase whose database connection dropped.

A worker killed mid-phase loses only that phase's call in flight: its lease runs out,
the sweeper queues the run again (pipelines/runs/leases.py), and the phase starts over
reusing the calls it had already bought (``BoughtCalls``). A phase whose database
connection broke gives its lease back and is queued again a moment later
(``drop_broken_connection``, ``queue_phase_again``).
"""

from __future__ import annotations

import logging
from collections import deque

from django.db import connection

from core.jobs import enqueue
from llm.context_editing import ContextCleared
from llm.providers.base import LLMResult, ToolCall
from pipelines.models import AgentCall, PipelineRun, RunTransition

logger = logging.getLogger(__name__)

# A phase whose database connection dropped is queued again this many seconds later.
DATABASE_RETRY_SECONDS = 2

REPLY_REUSED = "\n[Resumed: this reply was bought before the worker stopped, so it is reused, not bought again.]\n"


class BoughtCalls:
    """The replies this phase bought before its worker died: the calls recorded since
    the transition that entered the phase. The resumed phase asks the same questions in
    the same order (same prompt, same tool results) and takes these replies instead of
    buying them again, until a question differs."""

    def __init__(self, run: PipelineRun, agent_name: str) -> None:
        entries = RunTransition.objects.filter(run=run, to_status=run.status).order_by("-id")
        self.phase_entry: int | None = entries.values_list("pk", flat=True).first()
        calls = AgentCall.objects.filter(run=run, agent=agent_name, phase_entry=self.phase_entry)
        self._calls = deque(calls.filter(response__isnull=False).order_by("id") if self.phase_entry else ())

    @property
    def replaying(self) -> bool:
        """Replies are left to reuse: the resumed phase is still asking what it asked."""
        return bool(self._calls)

    def take(self, attempt: int, prompt: str) -> LLMResult | None:
        """The reply bought for this question (``prompt``: what the request about to be
        made tells the agent last), or None: buy it."""
        if not self._calls:
            return None
        call = self._calls.popleft()
        if call.attempt != attempt or call.prompt != prompt:
            self._calls.clear()
            return None
        response = call.response or {}
        return LLMResult(
            text=call.response_text,
            tool_input=response.get("tool_input"),
            raw_tool_input=response.get("raw_tool_input", ""),
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cache_creation_input_tokens=call.cache_creation_input_tokens,
            cache_read_input_tokens=call.cache_read_input_tokens,
            model=call.model,
            stop_reason=response.get("stop_reason"),
            extra={"duration_ms": call.duration_ms, "reused": True},
            tool_calls=[ToolCall(**tool_call) for tool_call in response.get("tool_calls", [])],
            content=response.get("content", []),
            context_cleared=_context_cleared(response.get("context_cleared")),
        )


def _context_cleared(recorded: object) -> ContextCleared | None:
    """What context editing had cleared from a reused call's prompt, as recorded."""
    if not isinstance(recorded, dict):
        return None
    return ContextCleared(tool_uses=int(recorded.get("tool_uses", 0)), tokens=int(recorded.get("tokens", 0)))


def drop_broken_connection(run: PipelineRun, exc: Exception) -> None:
    """The database connection broke mid-phase (a restart, a failover, a killed
    backend): nothing of the phase was saved. Drop the broken connection (the next
    query opens a new one); the caller gives the phase back and queues it again
    (``queue_phase_again``), instead of leaving it leased until the lease runs out and
    the sweeper finds it."""
    logger.warning("Run %s: database connection lost during %s (%s); retrying the phase", run.pk, run.status, exc)
    connection.close()


def queue_phase_again(run_id: int) -> None:
    enqueue("pipelines.tasks.pipeline_advance", run_id, countdown=DATABASE_RETRY_SECONDS)
