"""Executes one phase of a run: the work behind the ``pipeline_advance`` Celery task.

A phase is claimed with a lease (compare-and-set on the run row, pipelines/leases.py),
its agent is called with streaming (pipelines/conversation.py), and its output is
saved together with the transition to the next phase — which queues the next task on
commit. A worker killed mid-phase loses only that phase's call in flight: its lease runs
out, the sweeper queues the run again, and the phase starts over reusing the calls it
had already bought (pipelines/recovery.py). Slow I/O (the LLM call) happens outside any
database transaction.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError

from core.exceptions import ApplicationError
from core.workers import shutdown_requested
from llm.providers.base import ProviderError

from . import agents, workspace
from .conversation import (
    BudgetExceeded,
    InvalidAgentOutput,
    PhaseInterrupted,
    call_agent,
    run_provider,
    should_stop,
)
from .events import AgentLogStream
from .learning import learn
from .leases import Lease
from .lessons import REVIEWER_SOURCE, feedback_moment, findings_moment
from .line_comments import line_comment_lesson_texts, line_comments_for_coder
from .lineage import context_record_agent_call
from .models import MAX_REVIEW_ITERATIONS, WORKING_STATUSES, PipelineRun, RunStatus
from .recall import recall_for_phase
from .recovery import drop_broken_connection, queue_phase_again
from .services import StaleRun, run_begin, run_transition

if TYPE_CHECKING:
    from repos.models import Repository
    from repos.verify import VerifyResult

logger = logging.getLogger(__name__)

VERIFIER = "verifier"
# The live log of a run's preparing phase: setup's output, the base commit's tests.
ENVIRONMENT = "environment"
ENVIRONMENT_BROKEN = "environment_broken"

REVIEW_GAVE_UP = "The review still failed after {n} rounds of fixes. See the findings, then Retry or edit the task."


def run_advance(*, run_id: int) -> None:
    """Execute the phase the run is in, if any. Safe to call twice for the same run:
    a run not in a working phase, or whose phase another worker holds, is left alone."""
    run = PipelineRun.objects.select_related("task__project", "started_by").filter(pk=run_id).first()
    if run is None:
        return
    if run.status == RunStatus.QUEUED:
        try:
            if not run_begin(run=run):
                return  # over a limit on runs at once: it waits queued until a place frees
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
        drop_broken_connection(run, exc)
        database_dropped = True
    finally:
        # A worker stopping hands its phase straight to the sweeper (acks_late does not
        # help: the job ended normally and was acknowledged).
        lease.release(hand_on=stopping)
    if database_dropped:
        queue_phase_again(run.pk)


def _execute_phase(run: PipelineRun, lease: Lease) -> None:
    try:
        if run.status == RunStatus.PLANNING:
            _plan(run, lease)
        elif run.status == RunStatus.PREPARING:
            _prepare(run, lease)
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
    from repos.tools import file_tree

    worktree = workspace.workspace_ensure(run)
    prompt = agents.planner_prompt(
        title=task.title, description=task.description, file_tree=file_tree(worktree=worktree)
    )
    tool_input = call_agent(run, lease, agents.PLANNER, prompt, instructions_from=worktree)
    plan = sorted(tool_input["subtasks"], key=lambda subtask: subtask["order"])
    from tasks.models import Task

    Task.objects.filter(pk=task.pk).update(subtasks=plan)
    repository = workspace.run_repository(run)
    from repos.environments.services import environment_needed

    needed = repository is not None and environment_needed(repository=repository, commit=run.base_commit)
    run_transition(
        run=run,
        to_status=RunStatus.PREPARING if needed else RunStatus.CODING,
        reason="plan ready",
        fields={"plan": plan},
        held_by=lease.token,
    )


def _prepare(run: PipelineRun, lease: Lease) -> None:
    """Before the Coder's first edit: the environment ready in the worktree (restored,
    or prepared by the setup script with network) and, when there is a test command,
    the tests run once on the base commit. Setup failing, or a test command that cannot
    even start, pauses the run as "environment broken": nothing of the code is at fault
    yet, so no fix round is spent on it."""
    from repos.environments.baseline import base_tests
    from repos.environments.services import (
        EnvironmentBroken,
        SetupCancelled,
        environment_make_ready,
    )

    worktree = workspace.workspace_ensure(run)
    repository = workspace.run_repository(run)
    if repository is None:
        run_transition(run=run, to_status=RunStatus.CODING, reason="no repository", held_by=lease.token)
        return
    log = AgentLogStream(task=run.task, run=run, agent=ENVIRONMENT)
    try:
        ready = environment_make_ready(
            repository=repository,
            worktree=worktree,
            commit=run.base_commit,
            on_output=log.write,
            should_cancel=lambda: should_stop(lease),
        )
    except SetupCancelled:
        log.flush()
        raise PhaseInterrupted from None
    except EnvironmentBroken as exc:
        log.flush()
        _pause_environment_broken(run, lease, exc.message, exc.output)
        return
    environment: dict[str, Any] = ready.as_dict()
    run.environment = environment  # the base tests' sandbox knows what was restored (saved below)
    command = repository.test_command.strip()
    if command:
        log.write(f"\n$ {command}\n(the tests on the base commit {run.base_commit[:12]}, before any change)\n")
        tests = base_tests(
            repository=repository,
            base_commit=run.base_commit,
            environment_key=ready.key,
            run_tests=lambda: _run_sandboxed_tests(run, lease, log, worktree, command),
        )
        if should_stop(lease):
            log.flush()
            raise PhaseInterrupted
        if tests.cannot_start:
            log.flush()
            _pause_environment_broken(run, lease, tests.cannot_start, tests.result.output[-4000:])
            return
        failing = tests.result.failing_tests
        known = "" if tests.ran_now else " (known from an earlier run of this base)"
        if tests.result.passed:
            verdict = "pass"
        elif failing:
            verdict = f"{len(failing)} already failing: {', '.join(failing[:10])}"
        else:
            verdict = f"fail (exit {tests.result.exit_code})"
        log.write(f"\n[base tests: {verdict}{known}]\n")
        environment["base_tests"] = tests.as_dict()
    log.flush()
    run_transition(
        run=run,
        to_status=RunStatus.CODING,
        reason="environment ready",
        fields={"environment": environment, "pause_kind": ""},
        held_by=lease.token,
    )


def _pause_environment_broken(run: PipelineRun, lease: Lease, message: str, output: str) -> None:
    tail = output.strip()[-1500:]
    error = f"{message}\n\n{tail}" if tail else message
    try:
        run_transition(
            run=run,
            to_status=RunStatus.PAUSED,
            reason="environment broken",
            fields={"error": error, "error_retryable": True, "pause_kind": ENVIRONMENT_BROKEN},
            held_by=lease.token,
        )
    except StaleRun:
        raise PhaseInterrupted from None


def _code(run: PipelineRun, lease: Lease) -> None:
    """The Coder edits the run's worktree itself: a tool conversation over the API
    (pipelines/coder_loop.py) or the provider's own agent (the Claude CLI,
    pipelines/coder_cli.py). What it leaves there is committed on the run's branch and
    is the change."""
    from .coder_cli import code_with_cli
    from .coder_loop import code_in_worktree

    worktree = workspace.workspace_ensure(run)
    # A phase redone after a crash must not find the files of the attempt that was lost.
    workspace.workspace_reset(run, worktree)
    workspace.workspace_restore_environment(run, worktree)
    # A person asked for changes: the next tasks of the project learn it now, not only
    # once this run ends (it may never pass).
    line_comments = line_comments_for_coder(run=run) if run.feedback else []
    learn(run, lease, feedback_moment(run, line_comment_lesson_texts(line_comments)))
    findings = run.review_findings if run.status == RunStatus.FIXING else []
    task = run.task
    prompt = agents.coder_editing_prompt(
        title=task.title,
        description=task.description,
        plan=run.plan,
        findings=findings,
        feedback=run.feedback,
        branch_diff=workspace.workspace_diff_text(run),
        line_comments=line_comments,
    )
    # Recalled once for the phase: the system prompt of every turn is the same cached prefix.
    recall = recall_for_phase(run, agents.CODER)
    edit = code_with_cli if run_provider(run).edits_worktree else code_in_worktree
    outcome = edit(run, lease, prompt, worktree, recall=recall)
    # The worktree is outside the transaction: a worker that lost its lease while the
    # Coder worked must not commit into the one its successor now uses.
    if not lease.confirm():
        raise PhaseInterrupted
    head = workspace.workspace_commit(run, worktree, outcome.summary)
    changes = workspace.workspace_changed_files(run) or []
    # The conversation's turns are in the daily log one by one; the lineage keeps it
    # whole: the prompt, then every edit and test run and what came of it.
    context_record_agent_call(
        run=run,
        agent=agents.CODER,
        outcome="ok",
        prompt=prompt,
        output={
            "summary": outcome.summary,
            "steps": outcome.steps,
            "files": [{"file_path": change["file_path"], "action": change["action"]} for change in changes],
            "head_commit": head,
        },
        daily_log=False,
        recalled=recall.record(),
    )
    # Out of turns or tokens: what was done is committed and reviewed like any change
    # (tests, the Reviewer), and the review adds the Coder's finding.
    coder_findings = [outcome.finding] if outcome.finding else []
    fields: dict[str, Any] = {
        "file_changes": changes,
        "change_problems": [],
        "coder_findings": coder_findings,
        "verify_result": None,
        "head_commit": head,
    }
    next_status = RunStatus.REVIEWING
    repository = workspace.run_repository(run)
    if repository is not None and repository.test_command.strip():
        next_status = RunStatus.VERIFYING
    reason = f"{len(changes)} file change(s) on the branch" + (" (out of turns)" if coder_findings else "")
    run_transition(run=run, to_status=next_status, reason=reason, fields=fields, held_by=lease.token)


def _verify(run: PipelineRun, lease: Lease) -> None:
    """Run the project's test command in the worktree; its output streams live as the
    ``verifier`` agent. Failing tests become findings in the review that follows."""
    from core.exceptions import SandboxUnavailable

    worktree = workspace.workspace_ensure(run)
    repository = workspace.run_repository(run)
    if repository is None or not repository.test_command.strip():
        run_transition(run=run, to_status=RunStatus.REVIEWING, reason="no test command", held_by=lease.token)
        return
    log = AgentLogStream(task=run.task, run=run, agent=VERIFIER)
    changed_environment = _environment_for_change(run, lease, log, worktree, repository)
    if isinstance(changed_environment, dict):
        run.environment = changed_environment
    log.write(f"$ {repository.test_command}\n")
    try:
        if isinstance(changed_environment, str):
            result = _setup_failed_result(changed_environment)
        else:
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
        fields={"verify_result": asdict(result), "environment": run.environment},
        held_by=lease.token,
    )


def _environment_for_change(
    run: PipelineRun, lease: Lease, log: AgentLogStream, worktree: Path, repository: Repository
) -> dict[str, Any] | str | None:
    """The run's environment again when its change touched a key file (a lockfile): the
    new one (a dict, kept with the run), the reason it could not be made (a str: the
    change broke setup, which the review hears as a failing test run), or None."""
    from repos.environments.services import EnvironmentBroken, SetupCancelled, environment_for_change

    try:
        ready = environment_for_change(
            repository=repository,
            worktree=worktree,
            ready=run.environment or {},
            base_commit=run.base_commit,
            head_commit=run.head_commit,
            on_output=log.write,
            should_cancel=lambda: should_stop(lease),
        )
    except SetupCancelled:
        log.flush()
        raise PhaseInterrupted from None
    except EnvironmentBroken as exc:
        log.write(f"\n{exc.message}\n")
        return f"{exc.message}\n{exc.output}"
    if ready is None:
        return None
    return {**ready.as_dict(), "base_tests": (run.environment or {}).get("base_tests")}


def _setup_failed_result(message: str) -> VerifyResult:
    from repos.verify import VerifyResult

    return VerifyResult(
        exit_code=None,
        passed=False,
        timed_out=False,
        cancelled=False,
        output=f"The tests did not run: with this change the environment could not be prepared.\n{message}",
        duration_ms=0,
        network_isolated=True,
        sandboxed=True,
    )


def _run_sandboxed_tests(
    run: PipelineRun, lease: Lease, log: AgentLogStream, worktree: Path, command: str
) -> VerifyResult:
    from repos.verify import run_project_tests

    sandbox, masker = workspace.run_test_environment(run)
    return run_project_tests(
        command=command,
        worktree=worktree,
        on_output=log.write,
        should_cancel=lambda: should_stop(lease),
        project=sandbox,
        masker=masker,
    )


def _base_failures(run: PipelineRun) -> list[str]:
    """The tests that already failed on the run's base commit, before any change."""
    base = (run.environment or {}).get("base_tests") or {}
    return list(base.get("failing_tests") or [])


def _verify_summary(verify_result: dict[str, Any] | None, base_failures: list[str] | None = None) -> str:
    if not verify_result:
        return ""
    if verify_result.get("passed"):
        return "The test command passed."
    if base_failures:
        return (
            "These tests already failed on the base commit, before this change (not its fault): "
            + ", ".join(base_failures[:30])
            + ".\n"
            + _verify_summary(verify_result)
        )
    state = "timed out" if verify_result.get("timed_out") else f"failed with exit code {verify_result.get('exit_code')}"
    return f"The test command {state}. The end of its output:\n" + str(verify_result.get("output", ""))[-6000:]


def _review(run: PipelineRun, lease: Lease) -> None:
    task = run.task
    from repos.verify import VerifyResult, verify_findings

    worktree = workspace.workspace_ensure(run)
    # Changes that could not be applied go straight back to the Coder: reviewing the
    # untouched branch would only pay for a review of nothing.
    known = [*run.change_problems, *run.coder_findings]
    if run.verify_result and not run.verify_result.get("passed"):
        known += verify_findings(VerifyResult(**run.verify_result), already_failing=_base_failures(run))
    diff_text = workspace.workspace_diff_text(run)
    if run.change_problems:
        review: dict[str, Any] = {"pass": False, "findings": []}
    else:
        prompt = agents.reviewer_prompt(
            title=task.title,
            description=task.description,
            plan=run.plan,
            diff_text=diff_text,
            verify_summary=_verify_summary(run.verify_result, _base_failures(run)),
        )
        review = call_agent(run, lease, agents.REVIEWER, prompt, worktree=worktree)
    # Tagged so that learning can tell the Reviewer's own findings from failing tests and
    # the Coder's out-of-turns note (pipelines/lessons.py).
    findings = [*known, *({**finding, "source": REVIEWER_SOURCE} for finding in review["findings"])]
    passed = bool(review["pass"]) and not known
    iteration = run.iteration + 1
    history = [*run.review_history, {"iteration": iteration, "pass": passed, "findings": findings}]
    if passed:
        # What the fix rounds had to fix is a lesson for the next tasks.
        half_life = task.project.lesson_half_life_hours
        learn(run, lease, findings_moment(run, history, half_life_hours=half_life))
    fields: dict[str, Any] = {
        "iteration": iteration,
        "review_findings": findings,
        "review_history": history,
        "coder_findings": [],  # now among this review's findings
    }
    if passed:
        to_status, reason = RunStatus.AWAITING_APPROVAL, "review passed"
    elif iteration < MAX_REVIEW_ITERATIONS:
        to_status, reason = RunStatus.FIXING, f"review {iteration} failed"
    else:
        to_status, reason = RunStatus.FAILED, "review failed"
        fields["error"] = REVIEW_GAVE_UP.format(n=iteration)
    run_transition(run=run, to_status=to_status, reason=reason, fields=fields, held_by=lease.token)
