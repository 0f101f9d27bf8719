"""The Celery app. Configuration lives in Django settings under the CELERY_ prefix.

Production: ``celery -A config worker`` and ``celery -A config beat --scheduler
django_celery_beat.schedulers:DatabaseScheduler`` with REDIS_URL set. Embedded mode:
both run in threads of the web process (config/embedded.py).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from celery import Celery, bootsteps
from celery.signals import worker_init, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")

app = Celery("autocoder")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Refreshes this worker's heartbeat key on the worker's timer (core/health.py).

    ``/healthz`` counts live workers from these keys; independent of beat and of
    Celery's own event heartbeats (``--without-heartbeat`` leaves it on).
    """

    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, parent: Any) -> None:
        from django.conf import settings

        if settings.EMBEDDED:
            return  # /healthz looks at the worker thread itself
        from core.health import HEARTBEAT_INTERVAL, record_worker_heartbeat

        record_worker_heartbeat(parent.hostname)
        self.tref = parent.timer.call_repeatedly(HEARTBEAT_INTERVAL, record_worker_heartbeat, (parent.hostname,))

    def stop(self, parent: Any) -> None:
        if self.tref is None:
            return
        from core.health import forget_worker_heartbeat

        self.tref.cancel()
        self.tref = None
        forget_worker_heartbeat(parent.hostname)


app.steps["worker"].add(WorkerHeartbeat)

#: Set when this process's worker is shutting down. Celery waits for running tasks
#: before it exits (and in the embedded mode so does Ctrl-C), so a long task checks
#: this between steps and stops early, leaving its work resumable.
shutdown_requested = threading.Event()


@worker_shutting_down.connect
def _on_worker_shutting_down(**kwargs: Any) -> None:
    shutdown_requested.set()


@worker_init.connect
def _on_worker_init(**kwargs: Any) -> None:
    # A new worker in a process whose previous one stopped (the embedded worker in
    # tests) starts with the flag down.
    shutdown_requested.clear()
