"""Who executes a run's phase: the worker's lease on it, and the sweeper that hands a
phase on when its worker has died.

A worker claims the phase it executes with a short lease (PIPELINE_LEASE_SECONDS, 10 s
by default) and one thread of the process renews it every quarter of that, whatever the
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
import time
import uuid
import weakref
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.jobs import job
from pipelines.models import WORKING_STATUSES, PipelineRun, RunStatus
from pipelines.runs.places import runs_waiting

logger = logging.getLogger(__name__)

# How often a streaming call looks at its run row (cancel must stop it within a second).
LEASE_CHECK_SECONDS = 0.5
# Renewals per lease period: a worker misses three in a row before its phase may move on.
LEASE_RENEWALS = 4
# A run with no lease at all (queued, or between phases) normally has its job waiting in
# the broker: the sweeper queues it again only once it has waited this long.
UNCLAIMED_GRACE_SECONDS = 15


class Lease:
    """This worker's claim on the run's current phase."""

    def __init__(self, run: PipelineRun) -> None:
        self.run_id = run.pk
        self.status = run.status
        self.token = uuid.uuid4().hex
        self.seconds = settings.PIPELINE_LEASE_SECONDS
        self._confirmed = 0.0  # monotonic time of the last claim or renewal written
        self._checked = 0.0
        self._held = False
        #: Monotonic time after which the phase has run too long (renewals stop).
        self.deadline = 0.0
        #: Renewed by the process's renewer thread (not inside an outer transaction).
        self.renewed_in_background = False

    def _mine(self) -> QuerySet[PipelineRun]:
        return PipelineRun.objects.filter(pk=self.run_id, status=self.status, lease_owner=self.token)

    def claim(self) -> bool:
        # Times taken before the write: the lease runs from then, however long it took.
        started, now = time.monotonic(), timezone.now()
        claimed = (
            PipelineRun.objects.filter(pk=self.run_id, status=self.status)
            .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
            .update(lease_owner=self.token, lease_expires_at=now + timedelta(seconds=self.seconds))
        )
        self._confirmed = self._checked = started
        self.deadline = started + settings.PIPELINE_PHASE_TIME_LIMIT
        self._held = claimed == 1
        # Inside an outer transaction (only a test runs a phase in one) another
        # connection could not see, let alone renew, the claimed row: check() renews.
        if self._held and not connection.in_atomic_block:
            self.renewed_in_background = True
            _renewer.add(self)
        return self._held

    def renew(self) -> bool:
        """Push the expiry a whole lease ahead; False if the lease is no longer ours."""
        started = time.monotonic()
        renewed = self._mine().update(lease_expires_at=timezone.now() + timedelta(seconds=self.seconds)) == 1
        if renewed:
            self._confirmed = started
        else:
            self._held = False
        return renewed

    def check(self) -> bool:
        """False once the run has left this phase (cancelled, say), another worker
        holds it, or no renewal has been written for a whole lease (then another
        worker may hold it by now: nothing more may be written on it). Looks at the
        row at most every LEASE_CHECK_SECONDS."""
        now = time.monotonic()
        if self.lapsed:
            self._held = False
        if not self._held or now - self._checked < LEASE_CHECK_SECONDS:
            return self._held
        self._checked = now
        if not self.renewed_in_background and now - self._confirmed >= self.seconds / LEASE_RENEWALS:
            if self.overran:
                return self._held
            return self.renew()
        self._held = self._mine().exists()
        return self._held

    @property
    def overran(self) -> bool:
        """The phase has run longer than PIPELINE_PHASE_TIME_LIMIT: it is renewed no more."""
        return time.monotonic() > self.deadline

    @property
    def lapsed(self) -> bool:
        """No renewal written for a whole lease (the worker stalled, or the database
        was away): another worker may be executing this phase by now."""
        return time.monotonic() - self._confirmed >= self.seconds

    def confirm(self) -> bool:
        """Check the row now, not at most every LEASE_CHECK_SECONDS: before a write
        outside the database (the worktree) that a stale worker must not make."""
        self._checked = 0.0
        return self.check()

    def release(self, *, hand_on: bool = False) -> None:
        """Give the phase back. ``hand_on``: its work is not done (the worker is
        stopping), so leave the lease run out: the sweeper's next round queues it."""
        _renewer.discard(self)
        PipelineRun.objects.filter(pk=self.run_id, lease_owner=self.token).update(
            lease_owner="", lease_expires_at=timezone.now() if hand_on else None
        )


class _Renewer:
    """Renews every lease this process holds, from one thread with one database
    connection. A thread-pool worker runs dozens of phases at once: a renewing thread
    and a PostgreSQL connection for each would double the worker's connections (the
    phase's own thread holds one) against the server's ``max_connections``.

    The thread starts with the first lease and ends, closing its connection, once it
    has none left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: set[Lease] = set()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._lock:
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="lease-renewer", daemon=True)
                self._thread.start()

    def discard(self, lease: Lease) -> None:
        with self._lock:
            self._leases.discard(lease)

    def holds(self, lease: Lease) -> bool:
        with self._lock:
            return lease in self._leases

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def _due(self) -> tuple[list[Lease], float]:
        """The leases to renew now and the seconds until the next round; ([], 0) when
        there are none left (the thread then ends: a claim starts another)."""
        with self._lock:
            if not self._leases:
                self._thread = None
                return [], 0.0
            now = time.monotonic()
            leases = list(self._leases)
        # A round every quarter of a renewal period; a lease is renewed in the round
        # nearest its period (at most a quarter early).
        tick = min(lease.seconds / LEASE_RENEWALS for lease in leases) / 4
        due = [lease for lease in leases if now - lease._confirmed >= lease.seconds / LEASE_RENEWALS - tick]
        return due, tick

    def _loop(self) -> None:
        try:
            while True:
                due, wait = self._due()
                if not wait:
                    return
                for lease in due:
                    self._renew(lease)
                time.sleep(wait)
        finally:
            connections.close_all()  # this thread's own

    def _renew(self, lease: Lease) -> None:
        if not self.holds(lease):
            return  # released meanwhile
        if not lease._held:
            self.discard(lease)  # its phase found it gone (check()): nothing to renew
            return
        if lease.overran:
            # Stops once the lease is no longer renewed: the phase ran too long (its
            # checks fail once the lease lapses; the sweeper hands the run on).
            logger.warning(
                "Run %s: phase %s ran longer than %d s; its lease is left to run out",
                lease.run_id,
                lease.status,
                settings.PIPELINE_PHASE_TIME_LIMIT,
            )
            self.discard(lease)
            return
        try:
            renewed = lease.renew()
        except DatabaseError as exc:
            # The next renewal opens a new connection; until then check() counts the
            # time since the last renewal that was written.
            logger.warning("Run %s: could not renew the lease (%s)", lease.run_id, exc)
            connection.close()
            return
        if not renewed:
            # No longer ours: the phase ended (its transition cleared the lease), was
            # cancelled, or another worker holds it.
            self.discard(lease)


_renewer = _Renewer()


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
