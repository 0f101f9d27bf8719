"""This process's Celery worker, as the apps see it: whether it is shutting down, its
heartbeat, and the embedded worker thread.

The state lives here, at the bottom of the layers, and the Celery wiring on top
(config/celery.py, config/embedded.py) registers with it: it sets the shutdown flag when
its worker shuts down, adds the heartbeat bootstep, and registers the embedded worker it
starts. The apps read the state from here and never import ``config``.

Heartbeats (production): each ``celery worker`` sets
``autocoder:worker-heartbeat:<queue>:<hostname>`` in the broker's Redis every
``HEARTBEAT_INTERVAL`` seconds with a ``HEARTBEAT_TTL`` expiry, and ``/healthz``
(core/health.py) counts the live keys. In the embedded mode the broker is in memory and
the worker is a thread of this process: both report its state.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Protocol

import redis
from celery import bootsteps
from django.conf import settings

from core.sandbox_limits import limits_enforcement
from core.sandbox_probe import sandbox_status

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 15.0
HEARTBEAT_TTL = 45
#: How long a heartbeat read or write may wait for Redis (the health checks' own budget).
REDIS_TIMEOUT = 1.5

# --- Shutting down -------------------------------------------------------------------

#: Set when this process's worker is shutting down. Celery waits for running tasks
#: before it exits (and in the embedded mode so does Ctrl-C), so a long task checks
#: this between steps and stops early, leaving its work resumable. Set and cleared by
#: the worker's signals (config/celery.py).
shutdown_requested = threading.Event()


# --- The embedded worker -------------------------------------------------------------


class EmbeddedWorkerHandle(Protocol):
    """What the apps need of the embedded worker (config/embedded.py's EmbeddedWorker)."""

    @property
    def worker_thread(self) -> threading.Thread: ...

    @property
    def stopped(self) -> threading.Event: ...

    @property
    def threads(self) -> int: ...


_embedded_lock = threading.Lock()
_embedded: EmbeddedWorkerHandle | None = None


def register_embedded_worker(worker: EmbeddedWorkerHandle | None) -> None:
    """Record the in-process worker that was started (None: no longer running)."""
    global _embedded
    with _embedded_lock:
        _embedded = worker


def unregister_embedded_worker(worker: EmbeddedWorkerHandle) -> None:
    """Forget ``worker`` if it is still the registered one."""
    global _embedded
    with _embedded_lock:
        if _embedded is worker:
            _embedded = None


def embedded_worker() -> EmbeddedWorkerHandle | None:
    """The in-process worker started by the embedded server, until it is stopped."""
    return _embedded


def embedded_worker_threads() -> int:
    """How many jobs the in-process worker runs at once (its threads); 0 without one."""
    embedded = embedded_worker()
    return embedded.threads if embedded is not None else 0


def embedded_worker_alive() -> bool:
    embedded = embedded_worker()
    return embedded is not None and embedded.worker_thread.is_alive() and not embedded.stopped.is_set()


# --- Heartbeats ----------------------------------------------------------------------


def redis_client(url: str, timeout: float) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)


def _heartbeat_prefix() -> str:
    # Per queue: deployments sharing a Redis (CELERY_QUEUE) count their own workers.
    return f"autocoder:worker-heartbeat:{settings.CELERY_TASK_DEFAULT_QUEUE}:"


def record_worker_heartbeat(hostname: str) -> None:
    """Mark the worker ``hostname`` alive for ``HEARTBEAT_TTL`` seconds (never raises).

    The value says when, whether this worker can sandbox test commands, and which
    limits hold there."""
    try:
        status = sandbox_status()
        sandbox = {**status.as_dict(), "limits": limits_enforcement(sandboxed=not status.disabled)}
        beat = json.dumps({"at": time.time(), "sandbox": sandbox})
        client = redis_client(settings.CELERY_BROKER_URL, 2.0)
        try:
            client.set(_heartbeat_prefix() + hostname, beat, ex=HEARTBEAT_TTL)
        finally:
            client.close()
    except Exception:  # a missed beat must not stop the worker's timer (logged)
        logger.warning("Worker heartbeat for %s not recorded", hostname, exc_info=True)


def forget_worker_heartbeat(hostname: str) -> None:
    """A worker shutting down stops counting at once (never raises)."""
    try:
        client = redis_client(settings.CELERY_BROKER_URL, 2.0)
        try:
            client.delete(_heartbeat_prefix() + hostname)
        finally:
            client.close()
    except Exception:  # the key expires anyway (logged)
        logger.warning("Worker heartbeat for %s not removed", hostname, exc_info=True)


def live_worker_count() -> int:
    client = redis_client(settings.CELERY_BROKER_URL, REDIS_TIMEOUT)
    try:
        return sum(1 for _ in client.scan_iter(match=_heartbeat_prefix() + "*", count=100))
    finally:
        client.close()


def live_worker_sandboxes() -> list[dict[str, Any]]:
    """The sandbox verdicts in the live workers' heartbeats."""
    client = redis_client(settings.CELERY_BROKER_URL, REDIS_TIMEOUT)
    try:
        keys = list(client.scan_iter(match=_heartbeat_prefix() + "*", count=100))
        values = client.mget(keys) if keys else []
    finally:
        client.close()
    reports = []
    for value in values:
        if value is None:
            continue  # expired between the scan and the read
        try:
            report = json.loads(value)["sandbox"]
        except (TypeError, ValueError, KeyError):
            continue  # a worker of an older release: no verdict
        if isinstance(report, dict):
            reports.append(report)
    return reports


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Refreshes this worker's heartbeat key on the worker's timer (added to the
    worker's steps by config/celery.py).

    ``/healthz`` counts live workers from these keys; independent of beat and of
    Celery's own event heartbeats (``--without-heartbeat`` leaves it on).
    """

    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, parent: Any) -> None:
        if settings.EMBEDDED:
            return  # /healthz looks at the worker thread itself
        record_worker_heartbeat(parent.hostname)
        self.tref = parent.timer.call_repeatedly(HEARTBEAT_INTERVAL, record_worker_heartbeat, (parent.hostname,))

    def stop(self, parent: Any) -> None:
        if self.tref is None:
            return
        self.tref.cancel()
        self.tref = None
        forget_worker_heartbeat(parent.hostname)
