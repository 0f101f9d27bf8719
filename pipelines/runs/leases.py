"""Who executes a run's phase: the worker's lease on it, and the sweeper that hands a
phase on when its worker has died.

A worker claims the phase it executes with a short lease (PIPELINE_LEASE_SECONDS, 10 s
by default; the primitive is core/leases.py) and one thread of the process renews it every quarter of that, whatever the
phase is blocked in (a stream, the test command, git): one thread and one database
connection for all the phases a thread-pool worker runs at once, not one each. A worker that dies stops renewing; the
sweeper, a loop in the celery beat process (and in the embedded server), looks every
PIPELINE_SWEEP_SECONDS for working runs whose lease ran out and queues them again, so a
killed worker's phase is running again some 10-13 s later. A worker that merely stalled
past its lease (a paused VM, say) finds the lease gone when it wakes and writes nothing:
its lease checks fail and its phase's transition is conditioned on the lease
(``run_transition(held_by=…)``).

A phase that runs longer than PIPELINE_PHASE_TIME_LIMIT is no longer renewed: its lease
runs out, its checks fail (it stops at its next one) and the sweeper hands it on. The
worker's thread pool has no time limits of its own (Celery's are the prefork pool's,
which kills the child process; a thread cannot be killed).
"""

from __future__ import annotations

import logging
import threading
import weakref
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from core import leases as core_leases
from core.jobs import job
from pipelines.models import WORKING_STATUSES, PipelineRun, RunStatus
from pipelines.runs.places import runs_waiting

logger = logging.getLogger(__name__)

# How often a streaming call looks at its run row (cancel must stop it within a second).
LEASE_CHECK_SECONDS = core_leases.LEASE_CHECK_SECONDS
# Renewals per lease period: a worker misses three in a row before its phase may move on.
LEASE_RENEWALS = core_leases.LEASE_RENEWALS
# A run with no lease at all (queued, or between phases) normally has its job waiting in
# the broker: the sweeper queues it again only once it has waited this long.
UNCLAIMED_GRACE_SECONDS = 15


class Lease(core_leases.Lease):
    """This worker's claim on the run's current phase (core/leases.py): held only while
    the run is still in that phase, renewed for at most PIPELINE_PHASE_TIME_LIMIT.
    ``release(hand_on=True)``: a worker stopping leaves the lease run out, so the
    sweeper's next round queues the phase again."""

    logger = logger

    def __init__(self, run: PipelineRun) -> None:
        super().__init__(
            PipelineRun,
            run.pk,
            seconds=settings.PIPELINE_LEASE_SECONDS,
            scope={"status": run.status},
            time_limit=settings.PIPELINE_PHASE_TIME_LIMIT,
            name=f"Run {run.pk}: phase {run.status}",
        )
        self.run_id = run.pk
        self.status = run.status


# The process's one renewing thread, shared with every other lease (the chat's).
_renewer = core_leases.renewer


# --- The sweeper ------------------------------------------------------------------------


def _needing_a_worker(now: datetime, grace_seconds: int) -> QuerySet[PipelineRun]:
    # A lease that ran out belonged to a worker that stopped renewing it: no grace. A
    # run never claimed waits for its queued job for ``grace_seconds`` first.
    return PipelineRun.objects.filter(status__in=[RunStatus.QUEUED, *WORKING_STATUSES]).filter(
        Q(lease_expires_at__lt=now)
        | Q(lease_expires_at__isnull=True, updated_at__lt=now - timedelta(seconds=grace_seconds))
    )


def runs_needing_a_worker(*, grace_seconds: int = UNCLAIMED_GRACE_SECONDS) -> list[int]:
    """Runs that should be executing but nobody is: queued or working, whose lease ran
    out (their worker died) or that nobody claimed for ``grace_seconds`` (their job was
    lost with a worker or broker). A queued run over a limit on runs at once is waiting,
    not lost: it does not need a worker until a place frees for it (pipelines/runs/places.py),
    so the sweeper does not queue it again every round to be turned away again."""
    candidates = list(_needing_a_worker(timezone.now(), grace_seconds).values_list("pk", "status"))
    waiting = runs_waiting(run_ids=[pk for pk, status in candidates if status == RunStatus.QUEUED])
    return [pk for pk, _ in candidates if pk not in waiting]


def runs_sweep(*, grace_seconds: int = UNCLAIMED_GRACE_SECONDS) -> list[int]:
    """Queue again the runs that need a worker; the ids queued."""
    queued = []
    for run_id in runs_needing_a_worker(grace_seconds=grace_seconds):
        # Take the run off the dead worker first, on the same conditions: a concurrent
        # sweep, or the next one while this job still waits in the queue, leaves it
        # alone, and the dead worker's token no longer matches anything.
        now = timezone.now()
        taken = (
            _needing_a_worker(now, grace_seconds)
            .filter(pk=run_id)
            .update(lease_owner="", lease_expires_at=None, updated_at=now)
        )
        if not taken:
            continue
        logger.warning("Run %s has no live worker; queueing it again", run_id)
        try:
            job("pipelines.tasks.pipeline_advance").delay(run_id)
        except Exception as exc:  # noqa: BLE001 - whatever the broker raised, a later sweep tries again
            logger.error(
                "Run %s: could not queue it again (%s); the sweeper tries again in %d s", run_id, exc, grace_seconds
            )
            break
        queued.append(run_id)
    return queued


class Sweeper:
    """``runs_sweep`` every ``interval`` seconds in a thread, until stopped.

    A loop, not a job celery beat sends: a job every two seconds would be a broker
    message and two worker log lines each time, and it would wait behind the phases
    that fill every worker's slots, just when a run needs handing on."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipeline-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        logger.info("Pipeline sweeper started: every %g s", self.interval)
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            while not self._stopped.wait(self.interval):
                try:
                    runs_sweep()
                except Exception as exc:  # noqa: BLE001 - the database away, say: the next round tries again
                    logger.warning("Pipeline sweeper: %s; trying again in %g s", exc, self.interval)
                    connections.close_all()
        finally:
            connections.close_all()  # this thread's own


_sweeper_lock = threading.Lock()
_sweeper: Sweeper | None = None
# Beats stopped already: one stopped before its thread got to beat_init (the embedded
# mode starts and stops beat in threads) must not start a sweeper after that.
_stopped_beats: weakref.WeakSet[Any] = weakref.WeakSet()


def sweeper_start(sender: Any = None, **kwargs: Any) -> Sweeper | None:
    """Start this process's sweeper, once (a ``beat_init`` receiver: it runs wherever
    celery beat runs, and a deployment has exactly one beat)."""
    global _sweeper
    with _sweeper_lock:
        if sender is not None and sender in _stopped_beats:
            return None
        if _sweeper is None:
            _sweeper = Sweeper(interval=settings.PIPELINE_SWEEP_SECONDS).start()
        return _sweeper


def sweeper_stop(*, beat: Any = None) -> None:
    """Stop this process's sweeper; ``beat``, the beat service stopping with it."""
    global _sweeper
    with _sweeper_lock:
        if beat is not None:
            _stopped_beats.add(beat)
        sweeper, _sweeper = _sweeper, None
    if sweeper is not None:
        sweeper.stop()
