"""The embedded (one-process) mode: no Redis, everything inside the one daphne process.

- ``EmbeddedChannelLayer`` lets Celery tasks running in worker threads publish to
  websocket consumers running on daphne's event loop.
- ``start_embedded_worker`` runs a Celery worker (``memory://`` broker, thread pool) and
  celery beat in daemon threads, and stops them when the server shuts down.

Why the hand-over, measured on two cores: with it, 6,000 events of 6,000 reached three
websocket clients in order, p50 about 1.4 ms and p99 about 3 ms. The plain in-memory
layer lost nothing but delivered only when something else woke daphne's loop (p50 about
450 ms, p99 950 ms on an idle server), and ``async_to_sync(group_send)`` from a worker
thread builds an event loop per call (p50 4-6 ms, tasks 35% slower).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from celery import Celery
from celery.beat import Service
from celery.signals import worker_shutting_down
from celery.worker import WorkController
from channels.layers import InMemoryChannelLayer
from django.db import connections

from core.workers import embedded_worker, register_embedded_worker, unregister_embedded_worker

logger = logging.getLogger(__name__)

T = TypeVar("T")


class EmbeddedChannelLayer(InMemoryChannelLayer):
    """An in-memory channel layer that can be sent to from any thread of the process.

    The plain layer's queues belong to the loop their consumers wait on: a send from a
    worker thread (``core.live.group_send``, which runs on a loop of its own) fills the
    queue without waking that loop, so delivery waits until something else
    wakes it (~450 ms measured). Here every send or group_send that arrives on another
    loop is run on the server's loop with ``run_coroutine_threadsafe``, which wakes it at
    once, and all queue and group bookkeeping happens on that one loop.
    """

    # Long enough for a busy loop; short enough that a send racing with shutdown (the
    # loop stops before running it) fails instead of hanging a worker thread.
    handover_timeout = 5.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: The loop consumers wait on: daphne's. Recorded on the first receive or
        #: group_add; may also be set explicitly.
        self.server_loop: asyncio.AbstractEventLoop | None = None

    def _remember_loop(self) -> None:
        loop = asyncio.get_running_loop()
        # Keep the first loop while it runs (daphne has one for its lifetime); take the
        # new one once the old has stopped (tests run one loop after another).
        if self.server_loop is not loop and (self.server_loop is None or not self.server_loop.is_running()):
            self.server_loop = loop

    async def _on_server_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        server = self.server_loop
        if server is None or server is asyncio.get_running_loop() or not server.is_running():
            return await coro
        future = asyncio.run_coroutine_threadsafe(coro, server)
        return await asyncio.wait_for(asyncio.wrap_future(future), self.handover_timeout)

    async def receive(self, channel: str) -> dict[str, Any]:
        self._remember_loop()
        return await super().receive(channel)

    async def group_add(self, group: str, channel: str) -> None:
        self._remember_loop()
        await super().group_add(group, channel)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        await self._on_server_loop(super().send(channel, message))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        await self._on_server_loop(super().group_send(group, message))


@dataclass
class EmbeddedWorker:
    app: Celery
    worker: WorkController
    worker_thread: threading.Thread
    beat: threading.Thread | None
    beat_service: Service | None
    stopped: threading.Event
    # The pool's size: the places for runs at once (pipelines/runs/places.py reads it).
    threads: int = 4

    def stop(self, timeout: float = 2.0) -> None:
        """Stop beat and the worker, waiting ``timeout`` seconds at most.

        Celery's thread pool waits for running tasks (and Python joins pool threads at
        exit), so a long task must watch ``core.workers.shutdown_requested`` (or its
        own flag set on ``worker_shutting_down``) for the process to exit promptly.
        Queued tasks are lost with the memory broker.
        """
        if self.stopped.is_set():
            return
        self.stopped.set()
        started = time.monotonic()
        # What `celery worker` sends on SIGTERM/SIGINT; WorkController.stop() does not.
        # Tasks' stop flags hang on it (core.workers.shutdown_requested among them).
        worker_shutting_down.send(sender=self.worker.hostname, sig="SIGTERM", how="Warm", exitcode=0)
        if self.beat_service is not None:
            self.beat_service.stop()
            # The pipeline sweeper started with beat (on beat_init) stops with it, even
            # if beat's thread has not got that far yet.
            from pipelines.runs.leases import sweeper_stop

            sweeper_stop(beat=self.beat_service)
        # worker.stop() blocks until running tasks finish: bound it from the outside.
        # (The worker thread itself notices within its 2 s poll; it is a daemon and
        # holds nothing by then, so nobody waits for it.)
        stopper = threading.Thread(target=self.worker.stop, name="celery-worker-stop", daemon=True)
        stopper.start()
        stopper.join(timeout)
        if self.beat is not None:
            # Beat sleeps at most 1 s between ticks, then saves last-run times.
            self.beat.join(max(0.0, started + timeout - time.monotonic()))
        unregister_embedded_worker(self)
        if stopper.is_alive():
            logger.warning("Embedded Celery worker: tasks still running; the process exits when they end")
        logger.info("Embedded Celery worker and beat stopped in %.2f s", time.monotonic() - started)


_lock = threading.Lock()


def running_worker() -> EmbeddedWorker | None:
    """The in-process worker started by ``start_embedded_worker``, until it is stopped
    (registered with core.workers, where the apps see it)."""
    running = embedded_worker()
    return running if isinstance(running, EmbeddedWorker) else None


def start_embedded_worker(*, concurrency: int = 4, beat: bool = True) -> EmbeddedWorker:
    """Start the in-process Celery worker and beat, once per process.

    Only the one ASGI server process may call this (config/asgi.py): the memory broker
    lives in this process, so ``.delay()`` from anywhere else is never seen here.
    """
    with _lock:
        running = running_worker()
        if running is not None:
            return running
        from .celery import app

        worker = app.WorkController(
            pool="threads",
            concurrency=concurrency,
            hostname=f"embedded-{os.getpid()}@{socket.gethostname()}",
            # Nothing to talk to: there is no other worker on the memory broker.
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        worker_thread = threading.Thread(target=worker.start, name="celery-worker", daemon=True)
        worker_thread.start()
        beat_service: Service | None = None
        beat_thread: threading.Thread | None = None
        if beat:
            # The DatabaseScheduler, as in production: the schedule in settings is
            # written to django_celery_beat's tables, operators can edit it in the admin,
            # and last-run times survive a restart. On SQLite it costs one small read a
            # tick and a write per run; IMMEDIATE transactions (settings) keep those
            # from clashing with request and task writes. Ticking at least once a second
            # (as celery's own threaded beat does) lets it stop within a second.
            beat_service = Service(app, max_interval=1, scheduler_cls=app.conf.beat_scheduler, remote_control=False)
            beat_thread = threading.Thread(target=_run_beat, args=(beat_service,), name="celery-beat", daemon=True)
            beat_thread.start()
        running = EmbeddedWorker(
            app=app,
            worker=worker,
            worker_thread=worker_thread,
            beat=beat_thread,
            beat_service=beat_service,
            stopped=threading.Event(),
            threads=concurrency,
        )
        register_embedded_worker(running)
        _stop_on_server_shutdown(running)
        logger.info(
            "Embedded Celery worker started (%d threads, broker %s)%s",
            concurrency,
            app.conf.broker_url,
            f" with beat ({app.conf.beat_scheduler})" if beat else "",
        )
        return running


def _run_beat(service: Service) -> None:
    try:
        service.start()
    finally:
        # Thread-local connections outlive their thread otherwise (and PostgreSQL
        # then refuses to drop a test database still "in use").
        connections.close_all()


def _stop_on_server_shutdown(embedded: EmbeddedWorker) -> None:
    # daphne runs Twisted and turns SIGINT/SIGTERM into a reactor shutdown; a "before
    # shutdown" trigger runs while the process is still whole. atexit would be too
    # late: Python joins the pool's threads (waiting for running tasks) before atexit.
    reactor = sys.modules.get("twisted.internet.reactor")
    if reactor is not None:
        reactor.addSystemEventTrigger("before", "shutdown", embedded.stop)
    else:
        atexit.register(embedded.stop)
