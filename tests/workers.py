"""Real workers for end-to-end tests: the embedded one (threads, ``memory://``) and
separate processes (``celery worker`` on Redis, or a bare phase runner)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from kombu import Queue

from config.celery import app
from config.embedded import EmbeddedWorker, start_embedded_worker


def wait_until(condition: Callable[[], bool], timeout: float, why: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s. {why()}")
        time.sleep(0.02)


@contextmanager
def embedded_worker(**kwargs: Any) -> Iterator[EmbeddedWorker]:
    # The memory broker lives as long as the test process: drop what other tests queued
    # (and nobody ran) so that this worker runs only this test's jobs.
    app.control.purge()
    worker = start_embedded_worker(**kwargs)
    try:
        yield worker
    finally:
        worker.stop()
        worker.worker_thread.join(5)


def subprocess_database_url() -> str:
    """The test database, as a URL for a subprocess's DATABASE_URL."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    credentials = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def subprocess_env(**extra: str) -> dict[str, str]:
    from config.settings.scratch_folders import SHARED_FOLDER_VARIABLE, process_scratch_folder

    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": subprocess_database_url(),
        # Its repositories and worktrees where this process keeps them, outliving it.
        SHARED_FOLDER_VARIABLE: str(process_scratch_folder()),
        **extra,
    }


def start_celery_worker(queue: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """A real ``celery -A config worker`` process consuming only ``queue``."""
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "--loglevel=INFO"]
    command += ["-Q", queue, "-n", f"{queue}-{time.monotonic_ns()}@%h"]
    command += ["--without-heartbeat", "--without-mingle", "--without-gossip"]
    # The worker also queues follow-up jobs (the next pipeline phase): to its own queue.
    env = {"CELERY_QUEUE": queue, **env}
    with log.open("ab") as out:
        return subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=subprocess_env(**env), stdout=out, stderr=subprocess.STDOUT
        )


# What config/celery.py's freeze_what_lasts logs, the last thing a worker does before it
# takes its first job.
WORKER_READY = "objects loaded at start frozen out of garbage collection"


def wait_for_worker_ready(process: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    """Until the ``celery worker`` process says it is ready. It starts in 7 s on a quiet
    machine and in 30 s or more on a loaded CI box: a test's own time limits measure what
    it tests, not the start-up."""

    def ready() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the worker exited with status {process.returncode}. {worker_log_tail(log)}")
        return WORKER_READY in log.read_text(errors="replace")

    wait_until(ready, timeout, why=lambda: worker_log_tail(log))


def worker_log_tail(log: Path) -> str:
    if not log.exists():  # the embedded worker logs into the test's own output
        return "(no worker log: the embedded worker's lines are in the test's captured log)"
    return "Worker log:\n" + log.read_text(errors="replace")[-4000:]


def delete_queue(name: str) -> None:
    """Remove a test's own queue from the broker (Redis: its list and bindings)."""
    with app.connection_for_write() as conn:
        # A queue Celery did not know is bound to an exchange of the same name, and
        # kombu deletes only the bindings this connection knows of: declare first.
        leftover = Queue(name, exchange=name, routing_key=name)(conn)
        leftover.declare()
        leftover.delete()


@contextmanager
def topology_worker(log: Path, concurrency: int = 2, **env: str) -> Iterator[None]:
    """A real worker of the topology the suite runs in, ready to take jobs: the embedded
    one (``concurrency`` threads, ``memory://``), or a ``celery worker`` process on Redis
    consuming a queue of its own, which this process's jobs go to meanwhile. ``env`` is
    the worker process's extra environment (e.g. the fake LLM's address)."""
    if settings.REDIS_URL is None:
        with embedded_worker(concurrency=concurrency, beat=False):
            yield
        return
    queue = f"autocoder-worker-{uuid.uuid4().hex[:10]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    process = start_celery_worker(queue, log, **env)
    try:
        wait_for_worker_ready(process, log)
        yield
    finally:
        app.conf.task_default_queue = previous
        process.terminate()
        process.wait(15)
        delete_queue(queue)


def drive_in_process(run: Any, max_steps: int = 30, *, follow: bool = True) -> Any:
    """Execute a run's phases in this process, one ``pipeline_advance`` at a time as the
    Celery worker would, until it stops needing a worker; the run, refreshed. ``follow``
    False: the phases only (``run_advance``), without what the task does after each —
    pushing a round's commits to its pull request and answering there — for a test to
    look in between."""
    from pipelines.models import WORKING_STATUSES, RunStatus
    from pipelines.phases.driver import run_advance
    from pipelines.tasks import pipeline_advance

    for _ in range(max_steps):
        run.refresh_from_db()
        if run.status not in (RunStatus.QUEUED, *WORKING_STATUSES):
            return run
        if follow:
            pipeline_advance(run.pk)
        else:
            run_advance(run_id=run.pk)
    raise AssertionError(f"run did not settle: {run.status}")


def advance_until_the_worker_stops(run_id: int, *, when: Callable[[], bool], timeout: float = 10) -> None:
    """One ``run_advance`` whose worker is told to stop (a warm shutdown) as soon as
    ``when`` holds, say once the fake model was asked its nth question."""
    from core.workers import shutdown_requested
    from pipelines.phases.driver import run_advance

    def stop_the_worker() -> None:
        deadline = time.monotonic() + timeout
        while not when() and time.monotonic() < deadline:
            time.sleep(0.02)
        shutdown_requested.set()

    stopper = threading.Thread(target=stop_the_worker)
    stopper.start()
    try:
        run_advance(run_id=run_id)
    finally:
        stopper.join()
        shutdown_requested.clear()
