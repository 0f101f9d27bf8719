"""Preparing: the repository's environment made ready for the run (setup run once per
key, restored into the worktree), then its test command once on the base commit. A
setup that fails or tests that cannot start pause the run as environment broken,
before any Coder call (docs/ARCHITECTURE.md, A run's states).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pipelines.agent_log import AgentLogStream
from pipelines.agents.turns import PhaseInterrupted, should_stop
from pipelines.models import PipelineRun, RunStatus
from pipelines.phases.verifying import run_sandboxed_tests
from pipelines.runs import workspace
from pipelines.runs.leases import Lease
from pipelines.runs.services import StaleRun, run_transition

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

# The live log of a run's preparing phase: setup's output, the base commit's tests.
ENVIRONMENT = "environment"
ENVIRONMENT_BROKEN = "environment_broken"


def execute(run: PipelineRun, lease: Lease) -> None:
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
            run_tests=lambda: run_sandboxed_tests(run, lease, log, worktree, command),
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
