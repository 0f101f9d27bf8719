"""The lease primitive (core/leases.py) on a row of a model with the lease columns (a
chat session here; pipelines' runs name the same columns): a claim only on a free or run
out lease, renewal and release only by the holder, a takeover only after expiry, renewal
by the process's thread whatever the work does, and one winner among racing claims."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from chat.models import ChatSession
from core import leases
from core.leases import Lease, lease_held
from tests.workers import wait_until


@pytest.fixture
def row(owner) -> ChatSession:
    return ChatSession.objects.create(user=owner, last_activity=timezone.now())


def _lease(row: ChatSession, seconds: float = 10, **kwargs) -> Lease:
    return Lease(ChatSession, row.pk, seconds=seconds, **kwargs)


def _columns(row: ChatSession) -> tuple[str, object]:
    owner, expires = ChatSession.objects.values_list("lease_owner", "lease_expires_at").get(pk=row.pk)
    return owner, expires


def _run_out(row: ChatSession) -> None:
    ChatSession.objects.filter(pk=row.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db
def test_claim_renew_and_release_succeed_only_for_the_holder(row) -> None:
    holder, other = _lease(row), _lease(row)
    assert holder.claim()
    owner, expires = _columns(row)
    assert owner == holder.token and expires > timezone.now() + timedelta(seconds=9)
    assert ChatSession.objects.filter(lease_held(), pk=row.pk).exists()
    assert ChatSession.objects.get(pk=row.pk).lease_is_held

    assert not other.claim(), "a live lease is not taken"
    assert not other.renew()
    assert not other.release()
    assert _columns(row) == (owner, expires), "the other's attempts wrote nothing"

    ChatSession.objects.filter(pk=row.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=1))
    assert holder.renew()
    assert _columns(row)[1] > timezone.now() + timedelta(seconds=9), "renewed a whole lease ahead"
    assert holder.check()

    assert holder.release()
    assert _columns(row) == ("", None)
    assert not ChatSession.objects.filter(lease_held(), pk=row.pk).exists()
    assert not holder.release(), "released already"
    assert other.claim(), "a released lease is free"


@pytest.mark.django_db
def test_a_lease_that_ran_out_is_taken_over_and_its_old_holder_writes_nothing(row) -> None:
    stale, successor = _lease(row), _lease(row)
    assert stale.claim()
    assert not successor.claim()
    _run_out(row)
    assert not ChatSession.objects.get(pk=row.pk).lease_is_held
    assert successor.claim(), "taken over once it ran out"

    stale._checked = 0.0
    assert not stale.check()
    assert not stale.renew()
    assert not stale.release()
    assert _columns(row)[0] == successor.token, "the stale holder's release leaves the successor's claim"
    assert successor.confirm()


@pytest.mark.django_db
def test_a_release_handing_on_leaves_the_lease_run_out(row) -> None:
    holder = _lease(row)
    assert holder.claim()
    assert holder.release(hand_on=True)
    owner, expires = _columns(row)
    assert owner == "" and expires is not None and expires <= timezone.now()
    assert _lease(row).claim()


@pytest.mark.django_db
def test_the_scope_conditions_every_claim_and_renewal(row, owner) -> None:
    assert not _lease(row, scope={"closed_at__isnull": False}).claim(), "out of scope: not claimed"
    holder = _lease(row, scope={"closed_at__isnull": True})
    assert holder.claim()
    ChatSession.objects.filter(pk=row.pk).update(closed_at=timezone.now())
    assert not holder.renew(), "the row left the lease's scope"
    assert holder.release(), "the release needs only the token"


@pytest.mark.django_db(transaction=True)
def test_the_renewer_keeps_a_lease_alive_while_the_work_writes_nothing(row) -> None:
    holder = _lease(row, seconds=1)  # renewed every quarter second
    assert holder.claim()
    assert holder.renewed_in_background
    try:
        first_expiry = _columns(row)[1]
        time.sleep(2.5)  # the work is blocked (a model call that streams nothing)
        owner, expiry = _columns(row)
        assert owner == holder.token and expiry > first_expiry
        assert not _lease(row, seconds=1).claim(), "not taken over while it is renewed"
        assert holder.check()
    finally:
        assert holder.release()
    assert not leases.renewer.holds(holder)
    wait_until(lambda: leases.renewer.thread is None, timeout=5, why=lambda: "the renewer outlived its last lease")


@pytest.mark.django_db(transaction=True)
def test_a_lease_past_its_time_limit_is_renewed_no_more(row) -> None:
    holder = _lease(row, seconds=1, time_limit=0.5, name="Test work")
    assert holder.claim()
    try:
        wait_until(lambda: not leases.renewer.holds(holder), timeout=5, why=lambda: "still renewed")
        time.sleep(1.3)  # a whole lease since its last renewal
        assert not holder.check(), "lapsed"
        assert _lease(row).claim(), "taken over"
    finally:
        holder.release()


@pytest.mark.django_db(transaction=True)
def test_of_claims_racing_for_a_free_row_exactly_one_wins(row) -> None:
    contenders = [_lease(row) for _ in range(4)]
    start = threading.Barrier(len(contenders))
    won: list[bool] = []

    def claim(lease: Lease) -> None:
        try:
            start.wait(10)
            won.append(lease.claim())
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(lease,)) for lease in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert sorted(won) == [False, False, False, True]
        [winner] = [lease for lease in contenders if lease._held]
        assert _columns(row)[0] == winner.token
    finally:
        for lease in contenders:
            lease.release()


class _BrokenLease(Lease):
    def renew(self) -> bool:
        raise RuntimeError("not a database error")


@pytest.mark.django_db(transaction=True)
def test_a_lease_whose_renewal_raises_does_not_stop_the_others_being_renewed(row, owner, caplog) -> None:
    """Once, in CI, one lease's renewal raised something other than a DatabaseError (a
    closed connection raises InterfaceError): the renewing thread died, and no lease of
    the process was renewed again."""
    other_row = ChatSession.objects.create(user=owner, last_activity=timezone.now())
    broken = _BrokenLease(ChatSession, other_row.pk, seconds=1, name="Broken work")
    holder = _lease(row, seconds=1)
    assert broken.claim() and holder.claim()
    try:
        first_expiry = _columns(row)[1]
        time.sleep(2.5)
        assert _columns(row)[1] > first_expiry, "still renewed"
        assert leases.renewer.thread is not None and leases.renewer.thread.is_alive()
        assert "Broken work: renewing the lease failed" in caplog.text
    finally:
        assert holder.release()
        leases.renewer.discard(broken)


def test_a_renewing_thread_that_died_is_replaced_by_the_next_claim(monkeypatch) -> None:
    renewer = leases._Renewer()
    started: list[threading.Thread] = []
    monkeypatch.setattr(renewer, "_loop", lambda: started.append(threading.current_thread()))
    first = Lease(ChatSession, 1, seconds=1)
    renewer.add(first)
    wait_until(lambda: renewer.thread is not None and not renewer.thread.is_alive(), timeout=5)
    renewer.add(Lease(ChatSession, 2, seconds=1))
    wait_until(lambda: len(started) == 2, timeout=5, why=lambda: f"threads started: {started}")
    assert started[0] is not started[1]
