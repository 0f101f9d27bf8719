"""One agent's turns over one phase: the engine every agent loop runs on.

A loop (the Planner's and Reviewer's answer, pipelines/agents/conversation.py; the
Coder's editing, pipelines/agents/coder.py and coder_cli.py) decides what to ask next;
``AgentTurns`` gets each reply — reused when a worker that died had already bought it
(pipelines/runs/recovery.py), otherwise bought, with backoff on retryable provider
errors, within the run's token budget and its task's spending ceiling, streamed into the agent's live log — keeps the
lessons of its ``[MEMORY: …]`` markers (pipelines/agents/memories.py), and records it
(pipelines/agents/services.py). A turn stops as soon as the worker shuts down or the
phase's lease is lost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.crypto import decrypt_secret
from core.workers import shutdown_requested
from llm.providers import provider_for
from llm.providers.base import Cancelled, LLMRequest, LLMResult, Provider, ProviderError
from pipelines.agent_log import AgentLogStream
from pipelines.agents.memories import PhaseMemories
from pipelines.agents.prompts import MESSAGE_FROM_PERSON
from pipelines.agents.services import agent_call_failed_record, agent_call_record, prompt_text
from pipelines.messages.services import Delivered, run_messages_take
from pipelines.models import PipelineRun
from pipelines.runs.ceiling import spend_ceiling_check
from pipelines.runs.leases import Lease
from pipelines.runs.recovery import REPLY_REUSED, BoughtCalls

BUDGET_EXCEEDED = (
    "This run has used {used:,} of its {budget:,}-token budget and the next call could exceed it. "
    "Raise the budget in the project settings (or RUN_TOKEN_BUDGET), then Retry."
)


class PhaseInterrupted(Exception):
    """The run was cancelled or changed, or the worker is stopping: drop this phase."""


class BudgetExceeded(Exception):
    pass


def run_provider(run: PipelineRun, agent: str = "") -> Provider:
    return provider_for(
        name=run.provider,
        model=run.model_for(agent) if agent else run.model,
        api_key=decrypt_secret(run.api_key_encrypted),
        base_url=run.endpoint,
    )


def should_stop(lease: Lease) -> bool:
    """While a reply streams: the lease's last answer, checked often and cheaply."""
    return shutdown_requested.is_set() or not lease.check()


def stopped_between_turns(lease: Lease) -> bool:
    """Between turns: the row itself, not the lease's cached answer — a cancelled run
    buys no further turn."""
    return shutdown_requested.is_set() or not lease.confirm()


def budget_check(run: PipelineRun) -> None:
    """BudgetExceeded when the next call could take the run over its token budget."""
    if run.token_budget and run.total_tokens + run.max_tokens > run.token_budget:
        raise BudgetExceeded(BUDGET_EXCEEDED.format(used=run.total_tokens, budget=run.token_budget))


@dataclass
class Turn:
    request: LLMRequest
    result: LLMResult
    attempt: int
    # The reply's text without its memory markers (what a summary or a log shows).
    shown: str
    # Bought by a worker that died and replayed: recorded and remembered back then.
    reused: bool


class AgentTurns:
    """``agent``'s turns in ``run``'s current phase. ``recalled`` is what the phase's
    recall gave the agent, recorded with each call; ``reuse`` False for an agent whose
    replies cannot be replayed (the CLI's edits went with the worktree's reset)."""

    def __init__(
        self,
        run: PipelineRun,
        lease: Lease,
        agent: str,
        *,
        recalled: dict[str, object],
        reuse: bool = True,
        provider: Provider | None = None,
    ) -> None:
        self.run = run
        self.lease = lease
        self.agent = agent
        self.recalled = recalled
        self.log = AgentLogStream(task=run.task, run=run, agent=agent)
        self.memories = PhaseMemories(run, agent, self.log)
        # ``provider``: another than the run's (the Coder as an ACP agent).
        self.provider = provider or run_provider(run, agent)
        self._bought = BoughtCalls(run, agent)
        self._reuse = reuse
        # The person's messages this attempt at the phase has read (``hear``).
        self._heard: set[int] = set()
        # The tool results context editing had cleared as of the last call shown in the
        # log: a call that clears the same ones again says nothing new.
        self._cleared_shown = 0

    @property
    def phase_entry(self) -> int | None:
        """The transition that entered the phase: what groups its calls and messages."""
        return self._bought.phase_entry

    def hear(self, conversation: list[dict[str, Any]], *, turn: int) -> list[dict[str, Any]]:
        """``conversation`` with the person's messages the agent reads at ``turn`` added
        to what it is told last (pipelines/messages/services.py), each shown in its live
        log. Call it just before building the turn's request."""
        heard = run_messages_take(
            run=self.run,
            agent=self.agent,
            phase_entry=self.phase_entry,
            turn=turn,
            replaying=self._reuse and self._bought.replaying,
            heard=self._heard,
        )
        if not heard:
            return conversation
        self._heard.update(message.pk for message in heard)
        for message in heard:
            self.log.write(f"\n[Message from {message.author}: {message.body}]\n")
        self.log.flush()
        return with_messages(conversation, heard)

    def take(self, request: LLMRequest, *, attempt: int = 1) -> Turn:
        """The reply to ``request``, reused or bought; the lessons of its text kept."""
        result = self._bought.take(attempt, prompt_text(request)) if self._reuse else None
        if result is None:
            result = self.buy(request)
        else:
            self.log.write(REPLY_REUSED)
        reused = bool(result.extra.get("reused"))
        self._show_cleared(result)
        shown = self.memories.take_text(result.text, reused=reused)
        return Turn(request=request, result=result, attempt=attempt, shown=shown, reused=reused)

    def _show_cleared(self, result: LLMResult) -> None:
        """Say in the live log when context editing cleared more of the conversation
        (llm/context_editing.py): each batch once, as the call that cleared it ends."""
        cleared = result.context_cleared
        if cleared is None or cleared.tool_uses == self._cleared_shown:
            return
        self._cleared_shown = cleared.tool_uses
        self.log.write(f"\n[{cleared.describe()}.]\n")
        self.log.flush()

    def record(self, turn: Turn, *, problems: list[str] | None = None) -> None:
        agent_call_record(
            run=self.run,
            agent=self.agent,
            attempt=turn.attempt,
            request=turn.request,
            result=turn.result,
            problems=problems or [],
            phase_entry=self._bought.phase_entry,
            recalled=dict(self.recalled),
        )

    def buy(self, request: LLMRequest) -> LLMResult:
        """Ask the provider, retrying what it says can be retried (``LLM_RETRY_DELAYS``,
        or the provider's own ``retry_after`` up to a cap); the run's token budget and
        its task's spending ceiling (pipelines/runs/ceiling.py) checked first."""
        delays = list(settings.LLM_RETRY_DELAYS)
        for attempt in range(len(delays) + 1):
            budget_check(self.run)
            spend_ceiling_check(self.run)
            started = time.monotonic()
            try:
                result = self.provider.complete(
                    request, on_chunk=self.log.write, should_cancel=lambda: should_stop(self.lease)
                )
            except Cancelled:
                if self.lease.lapsed:
                    # Woken after its lease ran out: the phase may be another worker's by
                    # now, its log and its agent's memory too. Write nothing (not even the
                    # text the log's flusher would write next).
                    self.log.discard()
                    raise PhaseInterrupted from None
                self.log.flush()
                self._failed(started, "cancelled", "Cancelled.")
                raise PhaseInterrupted from None
            except ProviderError as exc:
                self.log.flush()
                self._failed(started, "error", exc.message)
                if not exc.retryable or attempt == len(delays):
                    raise
                wait = max(delays[attempt], min(exc.retry_after or 0.0, settings.LLM_RETRY_AFTER_CAP_SECONDS))
                self.log.write(f"\n[{exc.message} Retrying in {wait:g} s.]\n")
                self.log.flush()
                self._sleep_unless_stopped(wait)
                continue
            self.log.flush()
            result.extra["duration_ms"] = int((time.monotonic() - started) * 1000)
            return result
        raise AssertionError("unreachable")

    def _sleep_unless_stopped(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if should_stop(self.lease):
                raise PhaseInterrupted
            time.sleep(min(0.2, remaining))

    def _failed(self, started: float, outcome: str, error: str) -> None:
        duration_ms = int((time.monotonic() - started) * 1000)
        agent_call_failed_record(run=self.run, agent=self.agent, duration_ms=duration_ms, outcome=outcome, error=error)


def with_messages(conversation: list[dict[str, Any]], heard: list[Delivered]) -> list[dict[str, Any]]:
    """The conversation with a person's messages added to its last turn, the user's (the
    prompt, or the tool results the next request answers), as a text block."""
    text = "\n\n".join(MESSAGE_FROM_PERSON.format(author=message.author, body=message.body) for message in heard)
    *earlier, last = conversation
    content = last["content"]
    if isinstance(content, str):
        return [*earlier, {**last, "content": f"{content}\n\n{text}"}]
    return [*earlier, {**last, "content": [*content, {"type": "text", "text": text}]}]
