"""Calling a phase's agent: the conversation with the model.

The agent may explore the repository with read-only tools first; its reply streams
into its live log; a retryable provider error is retried with backoff, and an answer
that does not validate is asked for once more. Every call is recorded, costed and goes
into the agent's memory; the run's token budget is checked before each. A call stops
as soon as its worker shuts down or the phase's lease is lost.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings

from core.crypto import decrypt_secret
from core.workers import shutdown_requested
from llm.pricing import call_cost
from llm.providers import provider_for
from llm.providers.base import Cancelled, LLMRequest, LLMResult, Provider, ProviderError, Tool, ToolCall
from memory.selectors import memory_prompt_context
from memory.selectors.facts import memory_system_instructions
from pipelines.agents import prompts as agents
from pipelines.agents.lineage import context_record_agent_call
from pipelines.agents.memories import PhaseMemories
from pipelines.agents.recall import Recall, recall_for_phase
from pipelines.events import AgentLogStream, EventType, event_publish
from pipelines.models import AgentCall, PipelineRun
from pipelines.runs.leases import Lease
from pipelines.runs.recovery import REPLY_REUSED, BoughtCalls
from pipelines.runs.services import run_usage_add
from repos.instructions import repository_instructions

BUDGET_EXCEEDED = (
    "This run has used {used:,} of its {budget:,}-token budget and the next call could exceed it. "
    "Raise the budget in the project settings (or RUN_TOKEN_BUDGET), then Retry."
)


class PhaseInterrupted(Exception):
    """The run was cancelled or changed, or the worker is stopping: drop this phase."""


class InvalidAgentOutput(Exception):
    pass


class BudgetExceeded(Exception):
    pass


def run_provider(run: PipelineRun) -> Provider:
    return provider_for(name=run.provider, model=run.model, api_key=decrypt_secret(run.api_key_encrypted))


def should_stop(lease: Lease) -> bool:
    return shutdown_requested.is_set() or not lease.check()


def agent_system_prompt(
    run: PipelineRun, agent_name: str, root: Path | None, *, recall: Recall, role: str | None = None
) -> str:
    """The agent's system prompt: its role, the project's instructions (AGENTS.md or
    CLAUDE.md at ``root``, and the project's setting), the memory context: facts and
    goals, then what the phase recalled (``recall``: memories and the agent's notes)."""
    project = run.task.project
    memory = memory_prompt_context(user=project.owner, project=project)
    instructions = agents.instructions_block(
        repository_file=repository_instructions(root) if root is not None else None,
        project_instructions=project.instructions,
    )
    memory_context = "\n\n".join(filter(None, [memory, recall.block, memory_system_instructions()]))
    return agents.AGENTS[agent_name].system_prompt(memory_context, instructions, role=role)


def call_agent(
    run: PipelineRun,
    lease: Lease,
    agent_name: str,
    prompt: str,
    *,
    worktree: Path | None = None,
    instructions_from: Path | None = None,
    bare: bool = False,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Call the agent until its answer validates (one retry with the errors).

    Given a worktree (and a provider that can), the agent may first explore the
    repository with read-only tools: at most AGENT_TOOL_MAX_TURNS tool turns and
    AGENT_TOOL_TOKEN_LIMIT tokens, then its answer is forced. Every turn is a recorded,
    costed call, and every tool call shows in the agent's live log.

    The system prompt, read once here for all the phase's turns, has the project's
    instructions: AGENTS.md/CLAUDE.md at the root of ``instructions_from`` (default: the
    worktree) and the project's setting. A ``bare`` call (the distiller, which reads
    only what it is given) has its role alone: no instructions, memories or notes.
    ``max_tokens`` caps the answer below the run's own limit."""
    spec = agents.AGENTS[agent_name]
    tool = spec.tool
    if tool is None:
        raise ValueError(f"The {agent_name} answers in an editing conversation, not with a tool.")
    root = instructions_from if instructions_from is not None else worktree
    recall = Recall() if bare else recall_for_phase(run, agent_name)
    system = spec.system_prompt("") if bare else agent_system_prompt(run, agent_name, root, recall=recall)
    # A bare call was given nothing to recall: it records nothing (the panel leaves it out).
    recalled = {} if bare else recall.record()
    log = AgentLogStream(task=run.task, run=run, agent=agent_name)
    memories = PhaseMemories(run, agent_name, log)
    provider = run_provider(run)
    explore: tuple[Tool, ...] = ()
    if worktree is not None and provider.supports_tools:
        from repos.tools import REPO_TOOLS

        explore = tuple(REPO_TOOLS)
    answer_limit = min(limit for limit in (run.max_tokens, max_tokens) if limit) if max_tokens else run.max_tokens
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    problems: list[str] = []
    turns = tokens = 0
    bought = BoughtCalls(run, agent_name)
    for attempt in (1, 2):
        while True:
            out_of_turns = turns >= settings.AGENT_TOOL_MAX_TURNS or tokens >= settings.AGENT_TOOL_TOKEN_LIMIT
            request = LLMRequest(
                system=system,
                messages=messages,
                model=run.model,
                max_tokens=answer_limit,
                tool=tool,
                explore_tools=explore,
                force_answer=bool(explore) and out_of_turns,
            )
            result = bought.take(attempt, _prompt_text(request))
            if result is None:
                result = _call_with_backoff(run, lease, request, log, provider)
            else:
                log.write(REPLY_REUSED)
            reused = bool(result.extra.get("reused"))
            # Its text is streamed into the log and shown nowhere else: its lessons are
            # kept, there is nothing to strip.
            memories.take_text(result.text, reused=reused)
            tokens += result.all_input_tokens + result.output_tokens
            explorations = [call for call in result.tool_calls if call.name != tool.name]
            answered = len(explorations) < len(result.tool_calls)
            if not explore or request.force_answer or answered or not explorations:
                break
            assert worktree is not None
            _record_call(run, agent_name, attempt, request, result, [], bought.phase_entry, recalled=recalled)
            turns += 1
            tool_results = _run_repo_tools(worktree, explorations, log)
            messages = [
                *messages,
                {"role": "assistant", "content": result.content},
                {"role": "user", "content": tool_results},
            ]
        # Stripped before it is checked and recorded: the plan or the findings are stored
        # and shown without markers, and a field that held only a marker is empty.
        result.tool_input = memories.take_answer(result.tool_input, reused=reused)
        problems = spec.validate(result.tool_input)
        _record_call(run, agent_name, attempt, request, result, problems, bought.phase_entry, recalled=recalled)
        if not problems:
            return result.tool_input or {}
        log.write(f"\n[{tool.name} input was invalid: {'; '.join(problems[:3])}]\n")
        log.flush()
        correction = (
            f"Your previous call to {tool.name} was invalid:\n- "
            + "\n- ".join(problems)
            + f"\nCall {tool.name} again with input that fixes every problem."
        )
        if explore:
            # Keep what the agent has read: answer its call with the errors and force a
            # new answer.
            messages = [*messages, *_correction_turn(result, correction)]
            turns = settings.AGENT_TOOL_MAX_TURNS
        else:
            messages = [{"role": "user", "content": prompt + "\n\n" + correction}]
    raise InvalidAgentOutput(
        f"The {agent_name} gave invalid output twice, so the run stopped. Last problems: {'; '.join(problems[:3])}"
    )


def _run_repo_tools(worktree: Path, calls: list[ToolCall], log: AgentLogStream) -> list[dict[str, Any]]:
    """Execute the agent's read-only tool calls; their results for the next turn."""
    from repos.tools import execute_repo_tool

    results = []
    for call in calls:
        if call.input is None:
            text, is_error = f"The input of {call.name} was not valid JSON.", True
        else:
            output = execute_repo_tool(
                worktree=worktree, name=call.name, tool_input=call.input, max_chars=settings.AGENT_TOOL_OUTPUT_MAX_CHARS
            )
            text, is_error = output.text, output.is_error
        arguments = json.dumps(call.input or {}, ensure_ascii=False)[:200]
        outcome = f"error: {text.splitlines()[0][:200]}" if is_error and text else f"{text.count(chr(10)) + 1} lines"
        log.write(f"\n→ {call.name} {arguments} · {outcome}\n")
        results.append(
            {"type": "tool_result", "tool_use_id": call.id, "content": text or "(empty)", "is_error": is_error}
        )
    log.flush()
    return results


def _correction_turn(result: LLMResult, correction: str) -> list[dict[str, Any]]:
    """The messages that tell the agent its answer was invalid, continuing its
    conversation: every tool call of its reply needs a result."""
    if not result.tool_calls:
        content = result.content or [{"type": "text", "text": "(no answer)"}]
        return [{"role": "assistant", "content": content}, {"role": "user", "content": correction}]
    tool_results = [
        {"type": "tool_result", "tool_use_id": call.id, "content": correction, "is_error": True}
        for call in result.tool_calls
    ]
    return [{"role": "assistant", "content": result.content}, {"role": "user", "content": tool_results}]


def _check_budget(run: PipelineRun) -> None:
    if run.token_budget and run.total_tokens + run.max_tokens > run.token_budget:
        raise BudgetExceeded(BUDGET_EXCEEDED.format(used=run.total_tokens, budget=run.token_budget))


def _call_with_backoff(
    run: PipelineRun, lease: Lease, request: LLMRequest, log: AgentLogStream, provider: Provider
) -> LLMResult:
    delays = list(settings.LLM_RETRY_DELAYS)
    for attempt in range(len(delays) + 1):
        _check_budget(run)
        started = time.monotonic()
        try:
            result = provider.complete(request, on_chunk=log.write, should_cancel=lambda: should_stop(lease))
        except Cancelled:
            if lease.lapsed:
                # Woken after its lease ran out: the phase may be another worker's by
                # now, its log and its agent's memory too. Write nothing.
                raise PhaseInterrupted from None
            log.flush()
            _remember_failed_call(run, log.agent, started, "cancelled", "Cancelled.")
            raise PhaseInterrupted from None
        except ProviderError as exc:
            log.flush()
            _remember_failed_call(run, log.agent, started, "error", exc.message)
            if not exc.retryable or attempt == len(delays):
                raise
            wait = max(delays[attempt], min(exc.retry_after or 0.0, settings.LLM_RETRY_AFTER_CAP_SECONDS))
            log.write(f"\n[{exc.message} Retrying in {wait:g} s.]\n")
            log.flush()
            _sleep_unless_stopped(wait, lease)
            continue
        log.flush()
        result.extra["duration_ms"] = int((time.monotonic() - started) * 1000)
        return result
    raise AssertionError("unreachable")


def _sleep_unless_stopped(seconds: float, lease: Lease) -> None:
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        if should_stop(lease):
            raise PhaseInterrupted
        time.sleep(min(0.2, remaining))


def _remember_failed_call(run: PipelineRun, agent_name: str, started: float, outcome: str, error: str) -> None:
    duration_ms = int((time.monotonic() - started) * 1000)
    context_record_agent_call(run=run, agent=agent_name, outcome=outcome, duration_ms=duration_ms, error=error)


def _record_call(
    run: PipelineRun,
    agent_name: str,
    attempt: int,
    request: LLMRequest,
    result: LLMResult,
    problems: list[str],
    phase_entry: int | None,
    *,
    recalled: dict[str, Any],
) -> None:
    if result.extra.get("reused"):
        return  # recorded, costed and remembered when it was bought
    cost = call_cost(
        model=result.model or run.model,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cache_creation_input_tokens=result.cache_creation_input_tokens,
        cache_read_input_tokens=result.cache_read_input_tokens,
    )
    if result.reported_cost_usd is not None:
        # The provider's own figure (the Claude CLI's agent: many calls behind one result).
        cost = Decimal(str(result.reported_cost_usd)).quantize(Decimal("0.000001"))
    AgentCall.objects.create(
        run=run,
        agent=agent_name,
        phase=run.status,
        iteration=run.iteration,
        attempt=attempt,
        model=result.model,
        prompt=_prompt_text(request),
        response_text=result.text,
        tool_input=_recorded_tool_input(result),
        outcome=AgentCall.Outcome.INVALID if problems else AgentCall.Outcome.OK,
        error="; ".join(problems)[:5000],
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cache_creation_input_tokens=result.cache_creation_input_tokens,
        cache_read_input_tokens=result.cache_read_input_tokens,
        cost_usd=cost,
        duration_ms=result.extra.get("duration_ms", 0),
        phase_entry_id=phase_entry,
        recalled=recalled,
        response={
            "tool_input": result.tool_input,
            "raw_tool_input": result.raw_tool_input if result.tool_input is None else "",
            "stop_reason": result.stop_reason,
            "tool_calls": [asdict(call) for call in result.tool_calls],
            "content": result.content,
        },
    )
    # The agent's memory: its input and output as context items, and a daily log entry.
    context_record_agent_call(
        run=run,
        agent=agent_name,
        outcome=AgentCall.Outcome.INVALID if problems else AgentCall.Outcome.OK,
        prompt=_prompt_text(request),
        # A turn of a conversation without an answer tool (the Coder's) has no output of
        # its own: the conversation is remembered whole when it ends.
        output=result.tool_input if request.tool is not None else None,
        duration_ms=result.extra.get("duration_ms", 0),
        error="; ".join(problems),
        recalled=recalled,
    )
    run_usage_add(
        run=run,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cache_creation_input_tokens=result.cache_creation_input_tokens,
        cache_read_input_tokens=result.cache_read_input_tokens,
        cost=cost,
    )
    totals = (
        PipelineRun.objects.filter(pk=run.pk)
        .values("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "cost_usd")
        .get()
    )
    for name, value in totals.items():
        setattr(run, name, value)
    event_publish(
        task=run.task,
        run=run,
        event_type=EventType.RUN_UPDATE,
        data={
            "run_id": run.pk,
            "task_id": run.task_id,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cost_usd": str(Decimal(run.cost_usd).quantize(Decimal("0.0001"))),
        },
        # The board shows the cost on the task's card (static/js/board_live.js).
        board=True,
    )


def _prompt_text(request: LLMRequest) -> str:
    """What the agent was last told: the prompt, or the tool results of a tool turn."""
    content = request.messages[-1]["content"]
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)[:200_000]


def _recorded_tool_input(result: LLMResult) -> dict[str, Any]:
    if result.tool_input is not None:
        return result.tool_input
    if result.tool_calls:
        return {"tool_calls": [{"name": call.name, "input": call.input} for call in result.tool_calls]}
    return {"raw": result.raw_tool_input[:100_000]}
