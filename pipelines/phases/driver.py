"""Executes one phase of a run: the work behind the ``pipeline_advance`` Celery task.

A phase is claimed with a lease (compare-and-set on the run row, pipelines/runs/leases.py),
its agent is called with streaming (pipelines/agents/conversation.py), and its output is
saved together with the transition to the next phase — which queues the next task on
commit. A worker killed mid-phase loses only that phase's call in flight: its lease runs
out, the sweeper queues the run again, and the phase starts over reusing the calls it
had already bought (pipelines/runs/recovery.py). Slow I/O (the LLM call) happens outside any
database transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import InterfaceError, OperationalError

from core.exceptions import ApplicationError
from core.workers import shutdown_requested
from llm.providers.base import ProviderError
from pipelines.agents.conversation import InvalidAgentOutput
from pipelines.agents.turns import BudgetExceeded, PhaseInterrupted
from pipelines.models import WORKING_STATUSES, PipelineRun, RunStatus
from pipelines.phases import coding, planning, preparing, reviewing, verifying
from pipelines.runs.ceiling import SPEND_CEILING, SpendCeilingReached
from pipelines.runs.leases import Lease
from pipelines.runs.recovery import drop_broken_connection, queue_phase_again
from pipelines.runs.services import StaleRun, run_begin, run_transition

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

# Each working status and the module that executes it.
PHASES: dict[str, Callable[[PipelineRun, Lease], None]] = {
    RunStatus.PLANNING: planning.execute,
    RunStatus.PREPARING: preparing.execute,
    RunStatus.CODING: coding.execute,
    RunStatus.FIXING: coding.execute,
    RunStatus.VERIFYING: verifying.execute,
    RunStatus.REVIEWING: reviewing.execute,
}


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
        phase = PHASES.get(run.status)
        if phase is not None:
            phase(run, lease)
    except ProviderError as exc:
        _stop_run(run, lease, RunStatus.PAUSED if exc.retryable else RunStatus.FAILED, exc.message)
    except BudgetExceeded as exc:
        _stop_run(run, lease, RunStatus.PAUSED, str(exc))
    except SpendCeilingReached as exc:
        # Before ApplicationError: a ceiling is a pause a person lifts, not a failure.
        _stop_run(run, lease, RunStatus.PAUSED, exc.message, pause_kind=SPEND_CEILING)
    except InvalidAgentOutput as exc:
        _stop_run(run, lease, RunStatus.FAILED, str(exc))
    except StaleRun:
        # Cancelled (or otherwise moved on) while this phase ran: its output is dropped.
        raise PhaseInterrupted from None
    except ApplicationError as exc:
        # The repository went away or git refused (WorkspaceUnavailable, GitError): a
        # person has to look, then Retry.
        _stop_run(run, lease, RunStatus.PAUSED, exc.message)


def _stop_run(run: PipelineRun, lease: Lease, status: RunStatus, message: str, *, pause_kind: str = "") -> None:
    fields = {"error": message, "pause_kind": pause_kind}
    try:
        run_transition(run=run, to_status=status, reason=message[:500], fields=fields, held_by=lease.token)
    except StaleRun:
        raise PhaseInterrupted from None
