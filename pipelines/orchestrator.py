"""Executes one phase of a run: the work behind the ``pipeline_advance`` Celery task.

A phase is claimed with a lease (compare-and-set on the run row, pipelines/leases.py),
its agent is called with streaming, and its output is saved together with the
transition to the next phase — which queues the next task on commit. A worker killed
mid-phase loses only that phase's call in flight: its lease runs out, the sweeper queues
the run again, and the phase starts over reusing the calls it had already bought. Slow
I/O (the LLM call) happens outside any database transaction.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models import F

from core.crypto import decrypt_secret
from core.exceptions import ApplicationError
from core.jobs import enqueue
from core.workers import shutdown_requested
from llm.pricing import call_cost
from llm.providers import provider_for
from llm.providers.base import Cancelled, LLMRequest, LLMResult, Provider, ProviderError, Tool, ToolCall
from memory.selectors import memory_prompt_context
from memory.selectors.facts import memory_system_instructions
from memory.services.context import context_record_agent_call

from . import agents, workspace
from .diff import diff_changes
from .events import AgentLogStream, EventType, event_publish
from .leases import Lease
from .models import MAX_REVIEW_ITERATIONS, WORKING_STATUSES, AgentCall, PipelineRun, RunStatus, RunTransition
from .services import StaleRun, run_transition

if TYPE_CHECKING:
    from repos.tools import ReadLedger
    from repos.verify import VerifyResult

logger = logging.getLogger(__name__)

VERIFIER = "verifier"

# A phase whose database connection dropped is queued again this many seconds later.
DATABASE_RETRY_SECONDS = 2

BUDGET_EXCEEDED = (
    "This run has used {used:,} of its {budget:,}-token budget and the next call could exceed it. "
    "Raise the budget in the project settings (or RUN_TOKEN_BUDGET), then Retry."
)
REVIEW_GAVE_UP = "The review still failed after {n} rounds of fixes. See the findings, then Retry or edit the task."
REPLY_REUSED = "\n[Resumed: this reply was bought before the worker stopped, so it is reused, not bought again.]\n"


class PhaseInterrupted(Exception):
    """The run was cancelled or changed, or the worker is stopping: drop this phase."""


class InvalidAgentOutput(Exception):
    pass


class BudgetExceeded(Exception):
    pass


def run_provider(run: PipelineRun) -> Provider:
    return provider_for(name=run.provider, model=run.model, api_key=decrypt_secret(run.api_key_encrypted))


def run_advance(*, run_id: int) -> None:
    """Execute the phase the run is in, if any. Safe to call twice for the same run:
    a run not in a working phase, or whose phase another worker holds, is left alone."""
    run = PipelineRun.objects.select_related("task__project", "started_by").filter(pk=run_id).first()
    if run is None:
        return
    if run.status == RunStatus.QUEUED:
        try:
            run = run_transition(run=run, to_status=RunStatus.PLANNING, reason="picked up by a worker", enqueue=False)
        except StaleRun:
            return
    if run.status not in WORKING_STATUSES:
        return
    lease = Lease(run)
    if not lease.claim():
        return
    database_dropped = stopping = False
    try:
        _execute_phase(run, lease)
    except PhaseInterrupted:
        logger.info("Run %s: phase %s interrupted", run.pk, run.status)
        stopping = shutdown_requested.is_set()
    except (OperationalError, InterfaceError) as exc:
        # The database connection broke mid-phase (a restart, a failover, a killed
        # backend): nothing of the phase was saved. Drop the broken connection (the
        # next query opens a new one), give the phase back and queue it again, instead
        # of leaving it leased until the lease runs out and the sweeper finds it.
        logger.warning("Run %s: database connection lost during %s (%s); retrying the phase", run.pk, run.status, exc)
        connection.close()
        database_dropped = True
    finally:
        # A worker stopping hands its phase straight to the sweeper (acks_late does not
        # help: the job ended normally and was acknowledged).
        lease.release(hand_on=stopping)
    if database_dropped:
        enqueue("pipelines.tasks.pipeline_advance", run.pk, countdown=DATABASE_RETRY_SECONDS)


def _execute_phase(run: PipelineRun, lease: Lease) -> None:
    try:
        if run.status == RunStatus.PLANNING:
            _plan(run, lease)
        elif run.status in (RunStatus.CODING, RunStatus.FIXING):
            _code(run, lease)
        elif run.status == RunStatus.VERIFYING:
            _verify(run, lease)
        elif run.status == RunStatus.REVIEWING:
            _review(run, lease)
    except ProviderError as exc:
        _stop_run(run, lease, RunStatus.PAUSED if exc.retryable else RunStatus.FAILED, exc.message)
    except BudgetExceeded as exc:
        _stop_run(run, lease, RunStatus.PAUSED, str(exc))
    except InvalidAgentOutput as exc:
        _stop_run(run, lease, RunStatus.FAILED, str(exc))
    except StaleRun:
        # Cancelled (or otherwise moved on) while this phase ran: its output is dropped.
        raise PhaseInterrupted from None
    except ApplicationError as exc:
        # The repository went away or git refused (WorkspaceUnavailable, GitError): a
        # person has to look, then Retry.
        _stop_run(run, lease, RunStatus.PAUSED, exc.message)


def _stop_run(run: PipelineRun, lease: Lease, status: RunStatus, message: str) -> None:
    try:
        run_transition(run=run, to_status=status, reason=message[:500], fields={"error": message}, held_by=lease.token)
    except StaleRun:
        raise PhaseInterrupted from None


def _plan(run: PipelineRun, lease: Lease) -> None:
    task = run.task
    worktree = workspace.workspace_ensure(run)
    tree = ""
    if worktree:
        from repos.tools import file_tree

        tree = file_tree(worktree=worktree)
    prompt = agents.planner_prompt(title=task.title, description=task.description, file_tree=tree)
    tool_input = _call_agent(run, lease, agents.PLANNER, prompt)
    plan = sorted(tool_input["subtasks"], key=lambda subtask: subtask["order"])
    from tasks.models import Task

    Task.objects.filter(pk=task.pk).update(subtasks=plan)
    run_transition(run=run, to_status=RunStatus.CODING, reason="plan ready", fields={"plan": plan}, held_by=lease.token)


def _code(run: PipelineRun, lease: Lease) -> None:
    task = run.task
    worktree = workspace.workspace_ensure(run)
    if worktree:
        workspace.workspace_reset(run, worktree)
    findings = run.review_findings if run.status == RunStatus.FIXING else []
    prompt = agents.coder_prompt(
        title=task.title,
        description=task.description,
        plan=run.plan,
        current_changes=run.file_changes if (run.review_findings or run.feedback) else [],
        findings=findings,
        feedback=run.feedback,
        branch_diff=workspace.workspace_diff_text(run) if worktree else None,
    )
    ledger = workspace.read_ledger(run, worktree) if worktree and run_provider(run).supports_tools else None
    tool_input = _call_agent(run, lease, agents.CODER, prompt, worktree=worktree, ledger=ledger)
    changes = tool_input["changes"]
    fields: dict[str, Any] = {"file_changes": changes, "change_problems": [], "verify_result": None}
    next_status = RunStatus.REVIEWING
    if worktree:
        # The worktree is outside the transaction: a worker that lost its lease while
        # the Coder answered must not write into the one its successor now uses.
        if not lease.confirm():
            raise PhaseInterrupted
        problems, head = workspace.workspace_apply(run, worktree, changes, ledger=ledger)
        fields.update(change_problems=problems, head_commit=head)
        repository = workspace.run_repository(run)
        if not problems and repository is not None and repository.test_command.strip():
            next_status = RunStatus.VERIFYING
    run_transition(
        run=run, to_status=next_status, reason=f"{len(changes)} file change(s)", fields=fields, held_by=lease.token
    )


def _verify(run: PipelineRun, lease: Lease) -> None:
    """Run the project's test command in the worktree; its output streams live as the
    ``verifier`` agent. Failing tests become findings in the review that follows."""
    from core.sandbox import SandboxUnavailable

    worktree = workspace.workspace_ensure(run)
    repository = workspace.run_repository(run)
    if worktree is None or repository is None or not repository.test_command.strip():
        run_transition(run=run, to_status=RunStatus.REVIEWING, reason="no test command", held_by=lease.token)
        return
    log = AgentLogStream(task=run.task, run=run, agent=VERIFIER)
    log.write(f"$ {repository.test_command}\n")
    try:
        result = _run_sandboxed_tests(run, lease, log, worktree, repository.test_command)
    except SandboxUnavailable as exc:
        # Fail closed: the run pauses saying why; Retry runs the tests once the
        # operator has made the sandbox possible.
        log.write(f"{exc.message}\n")
        log.flush()
        raise
    if result.cancelled:
        log.flush()
        raise PhaseInterrupted
    verdict = "passed" if result.passed else ("timed out" if result.timed_out else f"failed (exit {result.exit_code})")
    log.write(f"\n[tests {verdict} in {result.duration_ms / 1000:.1f} s]\n")
    log.flush()
    context_record_agent_call(
        run=run,
        agent=VERIFIER,
        outcome="ok" if result.passed else "error",
        duration_ms=result.duration_ms,
        error="" if result.passed else f"tests {verdict}",
    )
    run_transition(
        run=run,
        to_status=RunStatus.REVIEWING,
        reason=f"tests {verdict}",
        fields={"verify_result": asdict(result)},
        held_by=lease.token,
    )


def _run_sandboxed_tests(
    run: PipelineRun, lease: Lease, log: AgentLogStream, worktree: Path, command: str
) -> VerifyResult:
    from core.sandbox import limits_from_settings
    from repos.verify import run_test_command

    return run_test_command(
        command=command,
        cwd=worktree,
        timeout=settings.VERIFY_TIMEOUT_SECONDS,
        limits=limits_from_settings(),
        max_output_chars=settings.VERIFY_OUTPUT_MAX_CHARS,
        on_output=log.write,
        should_cancel=lambda: _should_stop(lease),
    )


def _verify_summary(verify_result: dict[str, Any] | None) -> str:
    if not verify_result:
        return ""
    if verify_result.get("passed"):
        return "The test command passed."
    state = "timed out" if verify_result.get("timed_out") else f"failed with exit code {verify_result.get('exit_code')}"
    return f"The test command {state}. The end of its output:\n" + str(verify_result.get("output", ""))[-6000:]


def _review(run: PipelineRun, lease: Lease) -> None:
    task = run.task
    worktree = workspace.workspace_ensure(run)
    if worktree:
        from repos.verify import VerifyResult, verify_findings

        # Changes that could not be applied go straight back to the Coder: reviewing
        # the untouched branch would only pay for a review of nothing.
        known = list(run.change_problems)
        if run.verify_result and not run.verify_result.get("passed"):
            known += verify_findings(VerifyResult(**run.verify_result))
        diff_text = workspace.workspace_diff_text(run)
    else:
        known = agents.path_findings(run.file_changes)
        diff_text = diff_changes(run.file_changes).unified
    if run.change_problems:
        review: dict[str, Any] = {"pass": False, "findings": []}
    else:
        prompt = agents.reviewer_prompt(
            title=task.title,
            description=task.description,
            plan=run.plan,
            diff_text=diff_text,
            verify_summary=_verify_summary(run.verify_result),
        )
        review = _call_agent(run, lease, agents.REVIEWER, prompt, worktree=worktree)
    findings = [*known, *review["findings"]]
    passed = bool(review["pass"]) and not known
    iteration = run.iteration + 1
    history = [*run.review_history, {"iteration": iteration, "pass": passed, "findings": findings}]
    fields: dict[str, Any] = {"iteration": iteration, "review_findings": findings, "review_history": history}
    if passed:
        to_status, reason = RunStatus.AWAITING_APPROVAL, "review passed"
    elif iteration < MAX_REVIEW_ITERATIONS:
        to_status, reason = RunStatus.FIXING, f"review {iteration} failed"
    else:
        to_status, reason = RunStatus.FAILED, "review failed"
        fields["error"] = REVIEW_GAVE_UP.format(n=iteration)
    run_transition(run=run, to_status=to_status, reason=reason, fields=fields, held_by=lease.token)


# --- Calling an agent -----------------------------------------------------------------


def _should_stop(lease: Lease) -> bool:
    return shutdown_requested.is_set() or not lease.check()


def _call_agent(
    run: PipelineRun,
    lease: Lease,
    agent_name: str,
    prompt: str,
    *,
    worktree: Path | None = None,
    ledger: ReadLedger | None = None,
) -> dict[str, Any]:
    """Call the agent until its answer validates (one retry with the errors).

    Given a worktree (and a provider that can), the agent may first explore the
    repository with read-only tools: at most AGENT_TOOL_MAX_TURNS tool turns and
    AGENT_TOOL_TOKEN_LIMIT tokens, then its answer is forced. Every turn is a recorded,
    costed call, every tool call shows in the agent's live log, and what it read goes
    into ``ledger``."""
    spec = agents.AGENTS[agent_name]
    memory = memory_prompt_context(user=run.task.project.owner, project=run.task.project)
    system = spec.system_prompt("\n\n".join(filter(None, [memory, memory_system_instructions()])))
    log = AgentLogStream(task=run.task, run=run, agent=agent_name)
    provider = run_provider(run)
    explore: tuple[Tool, ...] = ()
    if worktree is not None and provider.supports_tools:
        from repos.tools import REPO_TOOLS

        explore = tuple(REPO_TOOLS)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    problems: list[str] = []
    turns = tokens = 0
    bought = _BoughtCalls(run, agent_name)
    for attempt in (1, 2):
        while True:
            out_of_turns = turns >= settings.AGENT_TOOL_MAX_TURNS or tokens >= settings.AGENT_TOOL_TOKEN_LIMIT
            request = LLMRequest(
                system=system,
                messages=messages,
                model=run.model,
                max_tokens=run.max_tokens,
                tool=spec.tool,
                explore_tools=explore,
                force_answer=bool(explore) and out_of_turns,
            )
            result = bought.take(attempt, request)
            if result is None:
                result = _call_with_backoff(run, lease, request, log, provider)
            else:
                log.write(REPLY_REUSED)
            tokens += result.input_tokens + result.output_tokens
            explorations = [call for call in result.tool_calls if call.name != spec.tool.name]
            answered = len(explorations) < len(result.tool_calls)
            if not explore or request.force_answer or answered or not explorations:
                break
            assert worktree is not None
            _record_call(run, agent_name, attempt, request, result, [], bought.phase_entry)
            turns += 1
            tool_results = _run_repo_tools(worktree, explorations, log, ledger)
            messages = [
                *messages,
                {"role": "assistant", "content": result.content},
                {"role": "user", "content": tool_results},
            ]
        problems = spec.validate(result.tool_input)
        _record_call(run, agent_name, attempt, request, result, problems, bought.phase_entry)
        if not problems:
            return result.tool_input or {}
        log.write(f"\n[{spec.tool.name} input was invalid: {'; '.join(problems[:3])}]\n")
        log.flush()
        correction = (
            f"Your previous call to {spec.tool.name} was invalid:\n- "
            + "\n- ".join(problems)
            + f"\nCall {spec.tool.name} again with input that fixes every problem."
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


class _BoughtCalls:
    """The replies this phase bought before its worker died: the calls recorded since
    the transition that entered the phase. The resumed phase asks the same questions in
    the same order (same prompt, same tool results) and takes these replies instead of
    buying them again, until a question differs."""

    def __init__(self, run: PipelineRun, agent_name: str) -> None:
        entries = RunTransition.objects.filter(run=run, to_status=run.status).order_by("-id")
        self.phase_entry: int | None = entries.values_list("pk", flat=True).first()
        calls = AgentCall.objects.filter(run=run, agent=agent_name, phase_entry=self.phase_entry)
        self._calls = deque(calls.filter(response__isnull=False).order_by("id") if self.phase_entry else ())

    def take(self, attempt: int, request: LLMRequest) -> LLMResult | None:
        if not self._calls:
            return None
        call = self._calls.popleft()
        if call.attempt != attempt or call.prompt != _prompt_text(request):
            self._calls.clear()
            return None
        response = call.response or {}
        return LLMResult(
            text=call.response_text,
            tool_input=response.get("tool_input"),
            raw_tool_input=response.get("raw_tool_input", ""),
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            model=call.model,
            stop_reason=response.get("stop_reason"),
            extra={"duration_ms": call.duration_ms, "reused": True},
            tool_calls=[ToolCall(**tool_call) for tool_call in response.get("tool_calls", [])],
            content=response.get("content", []),
        )


def _run_repo_tools(
    worktree: Path, calls: list[ToolCall], log: AgentLogStream, ledger: ReadLedger | None = None
) -> list[dict[str, Any]]:
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
            if ledger is not None and output.read is not None:
                ledger.note_read(output.read)
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
            result = provider.complete(request, on_chunk=log.write, should_cancel=lambda: _should_stop(lease))
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
        if _should_stop(lease):
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
) -> None:
    if result.extra.get("reused"):
        return  # recorded, costed and remembered when it was bought
    cost = call_cost(
        model=result.model or run.model, input_tokens=result.input_tokens, output_tokens=result.output_tokens
    )
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
        cost_usd=cost,
        duration_ms=result.extra.get("duration_ms", 0),
        phase_entry_id=phase_entry,
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
        output=result.tool_input,
        duration_ms=result.extra.get("duration_ms", 0),
        error="; ".join(problems),
    )
    PipelineRun.objects.filter(pk=run.pk).update(
        input_tokens=F("input_tokens") + result.input_tokens,
        output_tokens=F("output_tokens") + result.output_tokens,
        cost_usd=F("cost_usd") + cost,
    )
    totals = PipelineRun.objects.filter(pk=run.pk).values("input_tokens", "output_tokens", "cost_usd").get()
    run.input_tokens, run.output_tokens, run.cost_usd = (
        totals["input_tokens"],
        totals["output_tokens"],
        totals["cost_usd"],
    )
    event_publish(
        task=run.task,
        run=run,
        event_type=EventType.RUN_UPDATE,
        data={
            "run_id": run.pk,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cost_usd": str(Decimal(run.cost_usd).quantize(Decimal("0.0001"))),
        },
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
