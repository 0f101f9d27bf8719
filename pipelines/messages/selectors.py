"""Reads of a run's messages (pipelines/messages/services.py)."""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet

from llm.providers import CLAUDE_CLI
from pipelines.models import ACTIVE_STATUSES, CODER, PLANNER, REVIEWER, PipelineRun, RunMessage, RunStatus

# What a person is told of a message, read or waiting (the panel, the API's ``note``).
NOTE_READ = "read by the {agent} while {phase}"
NOTE_NEXT_TURN = "waiting for the {agent}'s next turn"
NOTE_CLI_NEXT_ROUND = (
    "waiting for the Coder's next round: the Claude CLI's Coder works as one call and reads messages only as it starts"
)
NOTE_QUEUED = "kept: the Planner reads it when the run starts"
NOTE_NEXT_ROUND = "kept for the run's next round (after a request for changes, or Retry)"
NOTE_NOT_READ = "not read: the run ended first"

AGENT_NAMES = {PLANNER: "Planner", CODER: "Coder", REVIEWER: "Reviewer"}
# The agent that reads a message next in each working status.
READER_FOR_PHASE: dict[str, str] = {
    RunStatus.PLANNING: PLANNER,
    RunStatus.PREPARING: CODER,
    RunStatus.CODING: CODER,
    RunStatus.FIXING: CODER,
    RunStatus.VERIFYING: REVIEWER,
    RunStatus.REVIEWING: REVIEWER,
}


def run_messages_for_run(*, run: PipelineRun) -> QuerySet[RunMessage]:
    """The run's messages, oldest first, read or waiting."""
    return RunMessage.objects.filter(run=run).select_related("author", "run").order_by("created_at", "id")


def run_message_note(*, message: RunMessage) -> str:
    """Who read ``message``, or when it will be read."""
    run = message.run
    if message.delivered_at is not None:
        agent = AGENT_NAMES.get(message.delivered_agent, "Coder")
        return NOTE_READ.format(agent=agent, phase=message.delivered_phase or "working")
    if run.status not in ACTIVE_STATUSES:
        return NOTE_NOT_READ
    if run.status == RunStatus.QUEUED:
        return NOTE_QUEUED
    reader = READER_FOR_PHASE.get(run.status)
    if reader is None:  # awaiting approval, paused
        return NOTE_NEXT_ROUND
    if run.status in (RunStatus.CODING, RunStatus.FIXING) and (run.provider or settings.LLM_PROVIDER) == CLAUDE_CLI:
        return NOTE_CLI_NEXT_ROUND
    return NOTE_NEXT_TURN.format(agent=AGENT_NAMES[reader])
