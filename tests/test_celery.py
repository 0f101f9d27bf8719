"""Celery wiring in both topologies, proven with a real job (accounts.tasks).

Embedded: the in-process worker and beat of config/embedded.py on ``memory://``.
Production: a separate ``celery -A config worker`` process on the Redis broker.
Worker threads and processes only see committed rows: ``transaction=True`` throughout.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, shared_task
from celery.signals import task_success
from django.conf import settings
from django.contrib.sessions.models import Session
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

from accounts.tasks import clear_expired_sessions
from config.celery import app
from config.embedded import EmbeddedWorker, start_embedded_worker
from core.workers import shutdown_requested
from tests.workers import (
    delete_queue,
    embedded_worker,
    start_celery_worker,
    subprocess_env,
    wait_until,
    worker_log_tail,
)

SCHEDULE_NAME = "clear-expired-sessions"

embedded_only = pytest.mark.skipif(
    settings.REDIS_URL is not None,
    reason="REDIS_URL is set, so this run's broker is Redis; the embedded mode is tested "
    "in the run without it, and in a real daphne process by test_embedded_server.py",
)
redis_only = pytest.mark.skipif(
    settings.REDIS_URL is None,
    reason="REDIS_URL is unset: the production mode needs a real Redis (CI's second run sets it)",
)


def make_sessions(prefix: str) -> tuple[list[str], list[str]]:
    now = timezone.now()
    expired = [f"{prefix}-expired-{i}".ljust(32, "x") for i in range(2)]
    live = [f"{prefix}-live".ljust(32, "x")]
    for key in expired:
        Session.objects.create(session_key=key, session_data="", expire_date=now - timedelta(minutes=1))
    for key in live:
        Session.objects.create(session_key=key, session_data="", expire_date=now + timedelta(days=1))
    return expired, live


def sessions_gone(keys: list[str]) -> Callable[[], bool]:
    return lambda: not Session.objects.filter(session_key__in=keys).exists()


def make_schedule_due() -> None:
    """Write the settings entry to the beat tables as beat would, last run 2 h ago."""
    ModelEntry.from_entry(SCHEDULE_NAME, app=app, **settings.CELERY_BEAT_SCHEDULE[SCHEDULE_NAME])
    PeriodicTask.objects.filter(name=SCHEDULE_NAME).update(last_run_at=timezone.now() - timedelta(hours=2))


# --- embedded ------------------------------------------------------------------------

task_started = threading.Event()
task_stopped_early = threading.Event()


@shared_task
def wait_for_shutdown() -> None:
    """A long task that, like a pipeline phase, stops early when the worker stops."""
    task_started.set()
    if shutdown_requested.wait(30):
        task_stopped_early.set()


@pytest.fixture
def embedded(transactional_db: None) -> Iterator[EmbeddedWorker]:
    with embedded_worker(concurrency=2) as worker:
        yield worker


@pytest.fixture
def results() -> Iterator[list[object]]:
    got: list[object] = []

    def record(sender: Any, result: object, **kwargs: Any) -> None:
        got.append((sender.name, result))

    task_success.connect(record, weak=False)
    yield got
    task_success.disconnect(record)


@embedded_only
def test_delay_from_another_thread_runs_on_the_embedded_worker(embedded: EmbeddedWorker, results: list[object]) -> None:
    expired, live = make_sessions("embedded")

    # As a request thread would; the memory broker is shared by the whole process.
    request = threading.Thread(target=clear_expired_sessions.delay)
    request.start()
    request.join()

    wait_until(sessions_gone(expired), timeout=10)
    assert Session.objects.filter(session_key__in=live).count() == 1
    wait_until(lambda: bool(results), timeout=5)
    assert results == [("accounts.tasks.clear_expired_sessions", 2)]


@embedded_only
def test_embedded_beat_sends_the_due_job_to_the_embedded_worker(transactional_db: None) -> None:
    make_schedule_due()
    expired, live = make_sessions("beat")

    with embedded_worker(concurrency=2):
        # Threaded beat ticks every second; its first tick finds the job due.
        wait_until(sessions_gone(expired), timeout=15)
    assert Session.objects.filter(session_key__in=live).count() == 1
    task = PeriodicTask.objects.get(name=SCHEDULE_NAME)
    # Saved when beat stopped: a restart does not run it again.
    assert task.total_run_count == 1
    assert task.last_run_at is not None
    assert timezone.now() - task.last_run_at < timedelta(minutes=1)


@embedded_only
def test_embedded_worker_starts_once_and_stops_a_cooperative_task_quickly(embedded: EmbeddedWorker) -> None:
    assert start_embedded_worker() is embedded
    task_started.clear()
    task_stopped_early.clear()
    wait_for_shutdown.delay()
    assert task_started.wait(10)

    started = time.monotonic()
    embedded.stop()
    assert time.monotonic() - started < 2.5
    # stop() sent worker_shutting_down, the task saw the flag, the pool let it finish.
    assert task_stopped_early.is_set()
    # Stopped: the next start makes a new worker (tests start and stop many).
    again = start_embedded_worker(concurrency=1, beat=False)
    try:
        assert again is not embedded
        assert not shutdown_requested.is_set()
    finally:
        again.stop()


# --- production ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real ``celery -A config worker`` process on the Redis broker.

    It consumes a queue of its own, so no other worker on this Redis takes the jobs.
    """
    queue = f"autocoder-test-{uuid.uuid4().hex[:12]}"
    log = tmp_path_factory.mktemp("celery") / "worker.log"
    process = start_celery_worker(queue, log)
    try:
        yield queue, log
    finally:
        process.terminate()
        process.wait(15)
        delete_queue(queue)


@redis_only
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_delay_runs_on_a_worker_process_through_redis(redis_worker: tuple[str, Path]) -> None:
    queue, log = redis_worker
    expired, live = make_sessions("redis")

    clear_expired_sessions.apply_async(queue=queue)

    # Includes the worker's start-up; the message waits in Redis meanwhile.
    wait_until(sessions_gone(expired), timeout=120, why=lambda: worker_log_tail(log))
    assert Session.objects.filter(session_key__in=live).count() == 1
    wait_until(lambda: "clear_expired_sessions" in log.read_text() and "succeeded" in log.read_text(), 10)
    assert "objects loaded at start frozen out of garbage collection" in log.read_text()


@redis_only
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_database_scheduler_sends_the_due_job_through_redis(redis_worker: tuple[str, Path]) -> None:
    queue, log = redis_worker
    make_schedule_due()
    expired, live = make_sessions("redis-beat")

    # What `celery -A config beat` runs, sending to the worker's own queue.
    # Not the current app: tasks queued by later tests in this process (through
    # shared_task proxies) must still go to the project's app and its queue.
    beat_app = Celery("autocoder-beat-test", set_as_current=False)
    beat_app.config_from_object("django.conf:settings", namespace="CELERY")
    beat_app.conf.task_default_queue = queue
    scheduler = DatabaseScheduler(app=beat_app)
    try:
        scheduler.tick()
        wait_until(sessions_gone(expired), timeout=120, why=lambda: worker_log_tail(log))
    finally:
        scheduler.close()
        beat_app.close()
    assert Session.objects.filter(session_key__in=live).count() == 1
    assert PeriodicTask.objects.get(name=SCHEDULE_NAME).total_run_count == 1


FREEZE_PROBE = """
import gc, sys, threading
import django
django.setup()
from config.celery import freeze_what_lasts
# The embedded worker's case first: a thread of the web (or test) process.
thread = threading.Thread(target=freeze_what_lasts)
thread.start()
thread.join()
print(gc.get_freeze_count(), "pipelines.phases.coding" in sys.modules)
freeze_what_lasts()  # a worker process's main thread
print(gc.get_freeze_count(), "pipelines.phases.coding" in sys.modules, "acp" in sys.modules)
"""


@pytest.mark.slow
def test_a_worker_process_loads_its_phases_then_freezes_them_and_an_embedded_worker_does_neither() -> None:
    # A fresh interpreter: frozen objects are never collected, not something to do to this one.
    done = subprocess.run(
        [sys.executable, "-c", FREEZE_PROBE],
        cwd=settings.BASE_DIR,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    in_a_thread, in_the_main_thread = (line.split() for line in done.stdout.splitlines())
    assert in_a_thread == ["0", "False"]
    frozen, loaded, acp_loaded = in_the_main_thread
    assert loaded == "True"
    # Only projects with an ACP Coder need its library (a second and more to load).
    assert acp_loaded == "False"
    assert int(frozen) > 100_000  # Django, the SDKs, the phases: what a full collection walked
