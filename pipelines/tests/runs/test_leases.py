"""Leases and the sweeper: a phase's worker keeps its lease alive from a thread of its
own, a worker that lost its lease writes nothing, and the sweeper hands a phase whose
lease ran out to another worker at once (a run nobody claimed, only after a grace)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest
from celery.signals import beat_init
from django.conf import settings
from django.db import connection
from django.utils import timezone

from pipelines.models import PipelineRun, RunStatus
from pipelines.runs import leases
from pipelines.runs.leases import Lease, Sweeper, runs_needing_a_worker, runs_sweep
from pipelines.runs.services import StaleRun, run_start, run_transition
from tasks.models import Task
from tests.factories import TaskFactory
from tests.workers import wait_until

PLAN = [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]


@pytest.fixture(autouse=True)
def _server_key(settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-test-key"


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The runs handed to the broker (pipeline_advance.delay, by a start or a sweep)."""
    sent: list[int] = []
    monkeypatch.setattr("pipelines.tasks.pipeline_advance.delay", sent.append)
    return sent


def _planning(task: Task, owner) -> PipelineRun:
    return run_transition(run=run_start(task=task, user=owner), to_status=RunStatus.PLANNING, enqueue=False)


def _lease_row(run: PipelineRun) -> tuple[str, object]:
    row = PipelineRun.objects.values_list("lease_owner", "lease_expires_at").get(pk=run.pk)
    return row[0], row[1]


@pytest.mark.django_db(transaction=True)
def test_a_claimed_lease_is_renewed_by_its_thread_while_the_phase_is_busy(task, owner, settings, queued) -> None:
    settings.PIPELINE_LEASE_SECONDS = 5  # renewed every 1.25 s
    run = _planning(task, owner)
    lease = Lease(run)
    assert lease.claim()
    try:
        _, first_expiry = _lease_row(run)
        # The phase's own thread does nothing here (a long git command, say): the
        # lease is renewed all the same, and keeps running ahead of the clock.
        time.sleep(3)
        owner_token, expiry = _lease_row(run)
        assert owner_token == lease.token
        assert expiry > first_expiry
        assert expiry > timezone.now() + timedelta(seconds=3)
        assert lease.check()
    finally:
        lease.release()
    assert _lease_row(run) == ("", None)
    assert not leases._renewer.holds(lease)
    wait_until(lambda: leases._renewer.thread is None, timeout=5, why=lambda: "the renewer outlived its last lease")


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_lost_its_lease_writes_nothing(task, owner, settings, queued) -> None:
    settings.PIPELINE_LEASE_SECONDS = 5
    run = _planning(task, owner)
    stale = Lease(run)
    assert stale.claim()
    # The worker stalls (a paused VM): its lease runs out and the sweeper hands the
    # phase on, and another worker claims it.
    leases._renewer.discard(stale)  # its renewals stop, as in a stopped process
    PipelineRun.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert runs_sweep() == [run.pk]
    successor = Lease(run)
    assert successor.claim()
    try:
        # The stale worker wakes up: its checks fail, and its phase's end is refused.
        stale._checked = 0.0
        assert not stale.check()
        with pytest.raises(StaleRun):
            run_transition(run=run, to_status=RunStatus.CODING, fields={"plan": PLAN}, held_by=stale.token)
        assert PipelineRun.objects.get(pk=run.pk).status == RunStatus.PLANNING
        assert not stale.renew()
        stale.release()
        assert _lease_row(run)[0] == successor.token, "the stale worker's release leaves the successor's lease"
        # The successor's end of the phase goes through.
        run_transition(run=run, to_status=RunStatus.CODING, fields={"plan": PLAN}, held_by=successor.token)
    finally:
        successor.release()
    assert PipelineRun.objects.get(pk=run.pk).status == RunStatus.CODING


@pytest.mark.django_db(transaction=True)
def test_one_thread_renews_every_lease_of_the_process(project, owner, settings, queued) -> None:
    """A thread-pool worker runs dozens of phases at once: their leases share one renewing
    thread (and its one database connection) instead of a thread and a connection each."""
    settings.PIPELINE_LEASE_SECONDS = 5
    settings.RUNS_AT_ONCE_PER_USER = settings.RUNS_AT_ONCE_PER_PROJECT = 6
    runs = [_planning(TaskFactory(project=project, title=f"Task {n}"), owner) for n in range(6)]
    held = [Lease(run) for run in runs]
    assert all(lease.claim() for lease in held)
    try:
        first = {run.pk: _lease_row(run)[1] for run in runs}
        renewers = [thread for thread in threading.enumerate() if thread.name == "lease-renewer"]
        assert len(renewers) == 1
        wait_until(
            lambda: all(_lease_row(run)[1] > first[run.pk] for run in runs),
            timeout=10,
            why=lambda: "not every lease was renewed",
        )
        assert [thread for thread in threading.enumerate() if thread.name == "lease-renewer"] == renewers
        assert all(lease.check() for lease in held)
    finally:
        for lease in held:
            lease.release()
    assert all(_lease_row(run) == ("", None) for run in runs)
    wait_until(lambda: not renewers[0].is_alive(), timeout=5, why=lambda: "the renewer outlived its last lease")


@pytest.mark.django_db(transaction=True)
def test_a_phase_past_its_time_limit_is_renewed_no_more_and_stops_writing(
    task, owner, settings, queued, caplog
) -> None:
    """The worker's thread pool has no time limits (a thread cannot be killed): a phase
    that runs too long loses its lease instead, stops at its next check, and the sweeper
    hands the run on."""
    settings.PIPELINE_LEASE_SECONDS = 5
    run = _planning(task, owner)
    lease = Lease(run)
    assert lease.claim()
    try:
        _, expiry = _lease_row(run)
        lease.deadline = time.monotonic() - 1  # as if PIPELINE_PHASE_TIME_LIMIT had passed
        with caplog.at_level(logging.WARNING, logger="pipelines.runs.leases"):
            wait_until(lambda: not leases._renewer.holds(lease), timeout=5, why=lambda: "still renewed")
        assert f"Run {run.pk}: phase planning ran longer than" in caplog.text
        assert _lease_row(run) == (lease.token, expiry), "not renewed"
        lease._confirmed -= lease.seconds  # the lease's period passes unrenewed
        assert not lease.check()
        PipelineRun.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        assert runs_sweep() == [run.pk], "the sweeper hands the run on"
    finally:
        lease.release()


@pytest.mark.django_db
def test_a_lease_not_renewed_for_a_whole_period_is_no_longer_held(task, owner) -> None:
    run = _planning(task, owner)
    lease = Lease(run)
    assert lease.claim()
    assert not lease.renewed_in_background, "inside the test's transaction check() renews"
    lease._confirmed -= lease.seconds
    assert not lease.check(), "a worker that could not renew for a whole lease stops writing"
    assert not lease.confirm()


@pytest.mark.django_db
def test_the_sweeper_hands_on_an_expired_lease_at_once_and_an_unclaimed_run_after_a_grace(
    task, owner, queued, settings
) -> None:
    # Room for the queued run beside the two working ones: over the limit it would wait
    # (test_queue.py), not need a worker.
    settings.RUNS_AT_ONCE_PER_PROJECT = 3
    expired = _planning(task, owner)
    PipelineRun.objects.filter(pk=expired.pk).update(
        lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(milliseconds=1)
    )
    unclaimed = run_start(task=TaskFactory(project=task.project), user=owner)
    live = _planning(TaskFactory(project=task.project), owner)
    Lease(live).claim()
    queued.clear()  # the starts' own jobs

    # Just entered its phase, the expired lease notwithstanding: handed on at once.
    assert runs_needing_a_worker() == [expired.pk]
    assert runs_sweep() == [expired.pk]
    assert queued == [expired.pk]
    assert _lease_row(expired) == ("", None), "the dead worker's token matches nothing any more"
    # The next sweep, with that job still in the queue, does not queue it again.
    assert runs_sweep() == []
    # A run nobody claimed is queued again only once its job has had time to start.
    PipelineRun.objects.filter(pk=unclaimed.pk).update(updated_at=timezone.now() - timedelta(seconds=16))
    assert runs_sweep() == [unclaimed.pk]
    assert queued == [expired.pk, unclaimed.pk]
    assert live.pk not in runs_needing_a_worker(grace_seconds=0)


@pytest.mark.django_db
def test_a_sweep_with_the_broker_down_says_so_and_a_later_one_tries_again(
    task, owner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = _planning(task, owner)
    PipelineRun.objects.filter(pk=run.pk).update(lease_owner="dead", lease_expires_at=timezone.now())

    def refuse(run_id: int) -> None:
        raise ConnectionError("broker away")

    monkeypatch.setattr("pipelines.tasks.pipeline_advance.delay", refuse)
    with caplog.at_level(logging.ERROR, logger="pipelines.runs.leases"):
        assert runs_sweep() == []
    assert f"Run {run.pk}: could not queue it again (broker away)" in caplog.text
    PipelineRun.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timedelta(seconds=16))
    sent: list[int] = []
    monkeypatch.setattr("pipelines.tasks.pipeline_advance.delay", sent.append)
    assert runs_sweep() == [run.pk] == sent


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_loop_hands_on_a_run_within_its_interval(task, owner, queued) -> None:
    run = _planning(task, owner)
    queued.clear()  # the start's own job
    sweeper = Sweeper(interval=0.2).start()
    try:
        time.sleep(0.5)
        assert queued == [], "a run whose lease is unclaimed and fresh is left to its job"
        PipelineRun.objects.filter(pk=run.pk).update(lease_owner="dead", lease_expires_at=timezone.now())
        handed_on = time.monotonic()
        wait_until(lambda: queued == [run.pk], timeout=2)
        assert time.monotonic() - handed_on < 1
    finally:
        sweeper.stop()
    assert not sweeper._thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_beat_starts_one_sweeper_and_the_embedded_mode_stops_it(settings, queued) -> None:
    settings.PIPELINE_SWEEP_SECONDS = 2
    try:
        beat_init.send(sender=None)
        beat_init.send(sender=None)  # a second beat_init in the same process: still one
        sweeper = leases._sweeper
        assert sweeper is not None and sweeper.interval == 2
        assert sweeper._thread.is_alive()
    finally:
        leases.sweeper_stop()
    assert leases._sweeper is None
    assert not sweeper._thread.is_alive()
    connection.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(settings.REDIS_URL is not None, reason="the embedded mode (REDIS_URL unset)")
def test_an_embedded_beat_stopped_at_once_leaves_no_sweeper_behind() -> None:
    from config.embedded import start_embedded_worker

    # Stopped before beat's thread gets to beat_init: that beat_init must not start a
    # sweeper that nothing would stop.
    embedded = start_embedded_worker(concurrency=1, beat=True)
    embedded.stop()
    assert embedded.beat is not None
    embedded.beat.join(10)
    assert not embedded.beat.is_alive()
    assert leases._sweeper is None
    assert not any(thread.name == "pipeline-sweeper" and thread.is_alive() for thread in threading.enumerate())
    connection.close()
