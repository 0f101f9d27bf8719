"""A worker's lease on a row: who does a piece of work now, for how long, and the
thread that keeps the claim alive while the work runs.

A lease is an owner token and an expiry on the row (``lease_owner``,
``lease_expires_at``; ``LeasedModel`` adds them, or a model names its own columns). Every
write is a compare-and-set on them: a claim succeeds only on a row nobody holds or whose
lease ran out (a takeover), a renewal and a release only for the token that holds it. A
worker that stalled past its lease and wakes up finds the row no longer its own and
writes nothing; one that finishes late cannot clear its successor's claim.

One thread per process renews every lease the process holds, every quarter of the
lease, whatever the work is blocked in (a model call that streams nothing for minutes,
the test command, git): renewal does not depend on the work's output, and a thread-pool
worker running dozens of pieces of work at once uses one thread and one database
connection for them all. A worker that dies stops renewing: once the lease has run out
another worker may take the row over.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import DatabaseError, connection, connections, models
from django.db.models import Q, QuerySet
from django.utils import timezone

logger = logging.getLogger(__name__)

# How often check() looks at the row (a cancelled piece of work stops within a second).
LEASE_CHECK_SECONDS = 0.5
# Renewals per lease period: a worker misses three in a row before its row may be taken over.
LEASE_RENEWALS = 4


def lease_held(
    now: datetime | None = None, *, owner_field: str = "lease_owner", expires_field: str = "lease_expires_at"
) -> Q:
    """Rows someone holds a live lease on (claimed and not yet run out)."""
    return Q(**{f"{expires_field}__gt": now or timezone.now()}) & ~Q(**{owner_field: ""})


class Lease:
    """A claim on one row of ``model``, held by ``token``.

    ``scope``: further conditions every claim, renewal and check also needs (the run
    still in the phase the lease is for, say); the release needs only the token.
    ``time_limit``: seconds after the claim past which the renewer stops renewing (the
    work ran too long: its lease runs out and another worker may take it over); None,
    renewed until released. ``name`` says whose lease it is in log lines."""

    #: Where the renewer's warnings about this lease go.
    logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        model: type[models.Model],
        pk: Any,
        *,
        seconds: float,
        scope: dict[str, Any] | None = None,
        time_limit: float | None = None,
        name: str = "",
        owner_field: str = "lease_owner",
        expires_field: str = "lease_expires_at",
    ) -> None:
        self.model = model
        self.pk = pk
        self.seconds = seconds
        self.scope = scope or {}
        self.time_limit = time_limit
        self.name = name or f"{model._meta.label} {pk}"
        self.owner_field = owner_field
        self.expires_field = expires_field
        self.token = uuid.uuid4().hex
        self._confirmed = 0.0  # monotonic time of the last claim or renewal written
        self._checked = 0.0
        self._held = False
        #: Monotonic time after which the work has run too long (renewals stop).
        self.deadline = math.inf
        #: Renewed by the process's renewer thread (not inside an outer transaction).
        self.renewed_in_background = False

    def _rows(self) -> QuerySet[Any]:
        return self.model._default_manager.filter(pk=self.pk, **self.scope)

    def _mine(self) -> QuerySet[Any]:
        return self._rows().filter(**{self.owner_field: self.token})

    def _expiry(self) -> datetime:
        return timezone.now() + timedelta(seconds=self.seconds)

    def claim(self) -> bool:
        """Take the row if nobody holds it or its holder's lease ran out."""
        # Times taken before the write: the lease runs from then, however long it took.
        started, now = time.monotonic(), timezone.now()
        free = Q(**{f"{self.expires_field}__isnull": True}) | Q(**{f"{self.expires_field}__lt": now})
        claimed = (
            self._rows()
            .filter(free)
            .update(**{self.owner_field: self.token, self.expires_field: now + timedelta(seconds=self.seconds)})
        )
        self._confirmed = self._checked = started
        self.deadline = started + self.time_limit if self.time_limit is not None else math.inf
        self._held = claimed == 1
        # Inside an outer transaction (only a test works in one) another connection
        # could not see, let alone renew, the claimed row: check() renews.
        if self._held and not connection.in_atomic_block:
            self.renewed_in_background = True
            renewer.add(self)
        return self._held

    def renew(self) -> bool:
        """Push the expiry a whole lease ahead; False if the lease is no longer ours."""
        started = time.monotonic()
        renewed = self._mine().update(**{self.expires_field: self._expiry()}) == 1
        if renewed:
            self._confirmed = started
        else:
            self._held = False
        return renewed

    def check(self) -> bool:
        """False once the row has left the lease's scope, another worker holds it, or no
        renewal has been written for a whole lease (then another worker may hold it by
        now: nothing more may be written on it). Looks at the row at most every
        LEASE_CHECK_SECONDS."""
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

    def confirm(self) -> bool:
        """Check the row now, not at most every LEASE_CHECK_SECONDS: before a write
        outside the database that a stale worker must not make."""
        self._checked = 0.0
        return self.check()

    @property
    def overran(self) -> bool:
        """The work has run longer than its time limit: it is renewed no more."""
        return time.monotonic() > self.deadline

    @property
    def lapsed(self) -> bool:
        """No renewal written for a whole lease (the worker stalled, or the database
        was away): another worker may hold the row by now."""
        return time.monotonic() - self._confirmed >= self.seconds

    def release(self, *, hand_on: bool = False) -> bool:
        """Give the row back, if it is still ours (a stale holder's release leaves its
        successor's claim alone). ``hand_on``: the work is not done, so leave the lease
        run out rather than unclaimed. False: it was no longer ours."""
        renewer.discard(self)
        self._held = False
        released = self.model._default_manager.filter(pk=self.pk, **{self.owner_field: self.token}).update(
            **{self.owner_field: "", self.expires_field: timezone.now() if hand_on else None}
        )
        return released == 1


class _Renewer:
    """Renews every lease this process holds, from one thread with one database
    connection. A thread-pool worker runs dozens of pieces of work at once: a renewing
    thread and a PostgreSQL connection for each would double the worker's connections
    (the work's own thread holds one) against the server's ``max_connections``.

    The thread starts with the first lease and ends, closing its connection, once it
    has none left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: set[Lease] = set()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._lock:
            self._leases.add(lease)
            # A thread that died (it should not: see _loop) would leave every lease of
            # the process unrenewed for good: another takes over.
            if self._thread is None or not self._thread.is_alive():
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
                    try:
                        self._renew(lease)
                    except Exception:  # one lease's failure must not end every lease's renewal
                        # Not only DatabaseError: a closed connection is an InterfaceError,
                        # and whatever else went wrong with one lease, the others are
                        # still renewed; this one is tried again next round.
                        lease.logger.exception("%s: renewing the lease failed", lease.name)
                        connection.close()
                time.sleep(wait)
        finally:
            connections.close_all()  # this thread's own

    def _renew(self, lease: Lease) -> None:
        if not self.holds(lease):
            return  # released meanwhile
        if not lease._held:
            self.discard(lease)  # its work found it gone (check()): nothing to renew
            return
        if lease.overran:
            # Stops once the lease is no longer renewed: the work ran too long (its
            # checks fail once the lease lapses; another worker may take it over).
            lease.logger.warning(
                "%s ran longer than %d s; its lease is left to run out", lease.name, lease.time_limit or 0
            )
            self.discard(lease)
            return
        try:
            renewed = lease.renew()
        except DatabaseError as exc:
            # The next renewal opens a new connection; until then check() counts the
            # time since the last renewal that was written.
            lease.logger.warning("%s: could not renew the lease (%s)", lease.name, exc)
            connection.close()
            return
        if not renewed:
            # No longer ours: the work ended (its last write cleared the lease), left the
            # lease's scope (a run cancelled), or another worker holds it.
            self.discard(lease)


renewer = _Renewer()
