"""Recording an agent call: the one service every agent loop calls after a reply.

A recorded call is priced, written as an ``AgentCall`` (what was asked and answered,
so a resumed phase can reuse it: pipelines/runs/recovery.py), remembered in the agent's
lineage (its input and output as context items, a daily log line), counted on the run
and its task, and published so the task page and the board show the new spend.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from decimal import Decimal
from typing import Any

from llm.pricing import call_cost
from llm.providers.base import LLMRequest, LLMResult
from pipelines.agents.lineage import context_record_agent_call
from pipelines.events import RunUpdate, event_publish
from pipelines.models import AgentCall, PipelineRun
from pipelines.runs.costs import run_usage_add

# What an AgentCall keeps of a tool turn's results.
PROMPT_TEXT_MAX_CHARS = 200_000


def prompt_text(request: LLMRequest) -> str:
    """What the agent was last told: the prompt, or the tool results of a tool turn. A
    resumed phase knows a reply it bought by this (pipelines/runs/recovery.py)."""
    content = request.messages[-1]["content"]
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)[:PROMPT_TEXT_MAX_CHARS]


def agent_call_record(
    *,
    run: PipelineRun,
    agent: str,
    attempt: int,
    request: LLMRequest,
    result: LLMResult,
    problems: list[str],
    phase_entry: int | None,
    recalled: dict[str, Any],
) -> None:
    """Record one reply the run bought (a reply reused after a crash was recorded when
    it was bought: nothing to do)."""
    if result.extra.get("reused"):
        return
    cost = _cost(run, result)
    outcome = AgentCall.Outcome.INVALID if problems else AgentCall.Outcome.OK
    asked = prompt_text(request)
    duration_ms = result.extra.get("duration_ms", 0)
    AgentCall.objects.create(
        run=run,
        agent=agent,
        phase=run.status,
        iteration=run.iteration,
        attempt=attempt,
        model=result.model,
        prompt=asked,
        response_text=result.text,
        tool_input=_recorded_tool_input(result),
        outcome=outcome,
        error="; ".join(problems)[:5000],
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cache_creation_input_tokens=result.cache_creation_input_tokens,
        cache_read_input_tokens=result.cache_read_input_tokens,
        cost_usd=cost,
        duration_ms=duration_ms,
        phase_entry_id=phase_entry,
        recalled=recalled,
        response={
            "tool_input": result.tool_input,
            "raw_tool_input": result.raw_tool_input if result.tool_input is None else "",
            "stop_reason": result.stop_reason,
            "tool_calls": [asdict(call) for call in result.tool_calls],
            "content": result.content,
            # What context editing cleared from the prompt this call was read with.
            "context_cleared": asdict(result.context_cleared) if result.context_cleared else None,
        },
    )
    context_record_agent_call(
        run=run,
        agent=agent,
        outcome=outcome,
        prompt=asked,
        # A turn of a conversation without an answer tool (the Coder's) has no output of
        # its own: the conversation is remembered whole when it ends.
        output=result.tool_input if request.tool is not None else None,
        duration_ms=duration_ms,
        error="; ".join(problems),
        recalled=recalled,
    )
    totals = run_usage_add(
        run=run,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cache_creation_input_tokens=result.cache_creation_input_tokens,
        cache_read_input_tokens=result.cache_read_input_tokens,
        cost=cost,
    )
    for name, value in totals.items():
        setattr(run, name, value)
    # The board shows the cost on the task's card too (static/js/board_live.js).
    event_publish(
        task=run.task,
        run=run,
        event=RunUpdate(
            run_id=run.pk,
            task_id=run.task_id,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=str(Decimal(run.cost_usd).quantize(Decimal("0.0001"))),
        ),
    )


def agent_call_failed_record(*, run: PipelineRun, agent: str, duration_ms: int, outcome: str, error: str) -> None:
    """A call that bought nothing (cancelled, or the provider failed): only the agent's
    lineage keeps it."""
    context_record_agent_call(run=run, agent=agent, outcome=outcome, duration_ms=duration_ms, error=error)


def _cost(run: PipelineRun, result: LLMResult) -> Decimal:
    if result.reported_cost_usd is not None:
        # The provider's own figure (the Claude CLI's agent: many calls behind one result).
        return Decimal(str(result.reported_cost_usd)).quantize(Decimal("0.000001"))
    return call_cost(
        model=result.model or run.model,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cache_creation_input_tokens=result.cache_creation_input_tokens,
        cache_read_input_tokens=result.cache_read_input_tokens,
        provider=result.provider,
        local=result.local_endpoint,
    )


def _recorded_tool_input(result: LLMResult) -> dict[str, Any]:
    if result.tool_input is not None:
        return result.tool_input
    if result.tool_calls:
        return {"tool_calls": [{"name": call.name, "input": call.input} for call in result.tool_calls]}
    return {"raw": result.raw_tool_input[:100_000]}
