"""The Celery app. Configuration lives in Django settings under the CELERY_ prefix.

Production: ``celery -A config worker`` and ``celery -A config beat --scheduler
django_celery_beat.schedulers:DatabaseScheduler`` with REDIS_URL set. Embedded mode:
both run in threads of the web process (config/embedded.py).
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_ready, worker_shutting_down
from celery.worker.consumer import Consumer
from celery.worker.state import active_requests

from core.workers import WorkerHeartbeat, shutdown_requested

logger = logging.getLogger(__name__)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")

app = Celery("autocoder")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# The worker's heartbeat for /healthz (core/workers.py).
app.steps["worker"].add(WorkerHeartbeat)


class BrokerLossTolerantConsumer(Consumer):
    """Celery's consumer, surviving a broker that goes away while a task runs.

    Celery 5.7.0 on a lost connection first detaches the connection's transport
    (``collect()``), then closes it. Two things then reach that detached transport and
    raise AttributeError, which Celery treats as unrecoverable, so the worker exits on
    any Redis restart in the middle of an ``acks_late`` job such as a pipeline phase
    (tests/test_redis_faults.py): closing the channel restores its unacknowledged
    messages, and the running job acknowledges its message when it ends.

    Neither can succeed: a delivery tag belongs to the channel that died (Celery's own
    ``on_close`` says so). The message stays in Redis's unacked set until its visibility
    timeout (or went with a restarted Redis); the pipeline is idempotent and its lease
    and sweeper resume a run whose job was lost.
    """

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        for request in tuple(active_requests):
            # Not acknowledged on the new connection either: the tag is meaningless there.
            request.acknowledged = True
        connection = self.connection
        if connection is not None:
            close = connection.close

            def close_detached() -> None:
                try:
                    close()
                except AttributeError:  # only the detached transport's (see above)
                    logger.warning("Broker connection lost; its unacknowledged messages stay on the broker")

            connection.close = close_detached
        super().on_connection_error_after_connected(exc)


app.conf.worker_consumer = f"{__name__}:BrokerLossTolerantConsumer"


# The apps read whether the worker is shutting down from core.workers.shutdown_requested:
# long tasks check it between steps and stop early, leaving their work resumable.
@worker_shutting_down.connect
def _on_worker_shutting_down(**kwargs: Any) -> None:
    shutdown_requested.set()


@worker_init.connect
def _on_worker_init(**kwargs: Any) -> None:
    # A new worker in a process whose previous one stopped (the embedded worker in
    # tests) starts with the flag down.
    shutdown_requested.clear()


# What a worker's phases import on their threads when they first run (they import lazily,
# which keeps the web processes light), and the embedding model recall loads. Not the
# Coder over ACP (pipelines.agents.coder_acp): only projects that choose an ACP agent
# use it, and its protocol library takes over a second to load, which every worker start
# would pay.
PHASE_MODULES = (
    "pipelines.phases.driver",
    "pipelines.phases.preparing",
    "pipelines.phases.planning",
    "pipelines.phases.coding",
    "pipelines.phases.verifying",
    "pipelines.phases.reviewing",
    "pipelines.agents.coder",
    "pipelines.agents.coder_cli",
    "pipelines.agents.distiller",
    "pipelines.runs.recovery",
    "pipelines.agent_log",
    "config.pubsub_layer",
)


@worker_ready.connect
def freeze_what_lasts(**kwargs: Any) -> None:
    """Load what every phase uses, then move it all out of the garbage collector's sight.

    A full collection walks every object the process holds and holds the GIL while it
    does: in a worker streaming 15 runs these passes took 0.2–0.8 s each, and every stream
    of the process stood still meanwhile (bench_concurrency.py's p99); frozen, 40 ms.
    Nearly all those objects are modules, classes and the model, loaded once and kept for
    good; frozen (gc.freeze), later passes walk only what runs create. Only the process
    of `celery worker` (its main thread): the embedded worker is a thread of the web
    process, whose objects, and a test process's, come and go.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for name in PHASE_MODULES:
        importlib.import_module(name)
    from memory.embeddings import get_embedder

    get_embedder()  # the model, loaded before the first recall waits for it
    gc.collect()
    gc.freeze()
    logger.info("Worker ready: %d objects loaded at start frozen out of garbage collection", gc.get_freeze_count())
