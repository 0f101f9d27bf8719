"""Verifying: the repository's test command in the sandbox on the run's worktree (an
environment of its own first when the change touched a key file); failures the base
already had are named, not counted against the change.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.agent_log import AgentLogStream
from pipelines.agents.lineage import context_record_agent_call
from pipelines.agents.turns import PhaseInterrupted, should_stop
from pipelines.models import PipelineRun, RunStatus
from pipelines.runs import workspace
from pipelines.runs.base_update import run_markers_left
from pipelines.runs.leases import Lease
from pipelines.runs.services import run_transition

if TYPE_CHECKING:
    from repos.models import Repository
    from repos.verify import VerifyResult

logger = logging.getLogger(__name__)

VERIFIER = "verifier"
MARKERS_LEFT_OUTPUT = (
    "The tests did not run: conflict markers (<<<<<<< or >>>>>>>) of the base merged in are still in {paths}. "
    "Resolve each conflict and remove its markers."
)


def execute(run: PipelineRun, lease: Lease) -> None:
    """Run the project's test command in the worktree; its output streams live as the
    ``verifier`` agent. Failing tests become findings in the review that follows."""
    from core.exceptions import SandboxUnavailable

    worktree = workspace.workspace_ensure(run)
    repository = workspace.run_repository(run)
    markers = run_markers_left(run)
    if markers:
        # The base's conflicts are not resolved: no test run proves anything yet.
        result = _markers_left_result(markers)
        run_transition(
            run=run,
            to_status=RunStatus.REVIEWING,
            reason="conflict markers left",
            fields={"verify_result": asdict(result)},
            held_by=lease.token,
        )
        return
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
            result = run_sandboxed_tests(run, lease, log, worktree, repository.test_command)
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


def _markers_left_result(paths: list[str]) -> VerifyResult:
    from repos.verify import VerifyResult

    return VerifyResult(
        exit_code=None,
        passed=False,
        timed_out=False,
        cancelled=False,
        output=MARKERS_LEFT_OUTPUT.format(paths=", ".join(paths)),
        duration_ms=0,
        network_isolated=True,
        sandboxed=True,
    )


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


def run_sandboxed_tests(
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


def base_failures(run: PipelineRun) -> list[str]:
    """The tests that already failed on the run's base commit, before any change."""
    base = (run.environment or {}).get("base_tests") or {}
    return list(base.get("failing_tests") or [])


def verify_summary(verify_result: dict[str, Any] | None, base_failures: list[str] | None = None) -> str:
    if not verify_result:
        return ""
    if verify_result.get("passed"):
        return "The test command passed."
    if base_failures:
        return (
            "These tests already failed on the base commit, before this change (not its fault): "
            + ", ".join(base_failures[:30])
            + ".\n"
            + verify_summary(verify_result)
        )
    state = "timed out" if verify_result.get("timed_out") else f"failed with exit code {verify_result.get('exit_code')}"
    return f"The test command {state}. The end of its output:\n" + str(verify_result.get("output", ""))[-6000:]
