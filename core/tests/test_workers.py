"""The worker's state in core/workers.py, and config registering with it."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from celery.signals import worker_init, worker_shutting_down

from core import workers


@dataclass
class FakeEmbedded:
    worker_thread: threading.Thread
    stopped: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def running_thread() -> Iterator[threading.Thread]:
    done = threading.Event()
    thread = threading.Thread(target=done.wait, daemon=True)
    thread.start()
    yield thread
    done.set()
    thread.join()


def test_the_embedded_worker_is_seen_while_registered_and_running(running_thread: threading.Thread) -> None:
    assert workers.embedded_worker() is None
    embedded = FakeEmbedded(worker_thread=running_thread)
    workers.register_embedded_worker(embedded)
    try:
        assert workers.embedded_worker() is embedded
        assert workers.embedded_worker_alive()
        embedded.stopped.set()
        assert not workers.embedded_worker_alive()
        workers.unregister_embedded_worker(FakeEmbedded(worker_thread=running_thread))  # not the registered one
        assert workers.embedded_worker() is embedded
    finally:
        workers.unregister_embedded_worker(embedded)
    assert workers.embedded_worker() is None
    assert not workers.embedded_worker_alive()


def test_the_celery_app_sets_and_clears_the_shutdown_flag() -> None:
    from config import celery

    assert not workers.shutdown_requested.is_set()
    worker_shutting_down.send(sender="test@host", sig="SIGTERM", how="Warm", exitcode=0)
    assert workers.shutdown_requested.is_set()
    # A new worker in the same process starts with the flag down (worker_init's receiver;
    # the signal itself would also run Django's worker fix-up here).
    receivers = [ref() if isinstance(ref, weakref.ReferenceType) else ref for _, ref in worker_init.receivers]
    assert celery._on_worker_init in receivers
    celery._on_worker_init()
    assert not workers.shutdown_requested.is_set()


def test_the_heartbeat_bootstep_is_one_of_the_workers_steps() -> None:
    from config.celery import app

    assert workers.WorkerHeartbeat in app.steps["worker"]
