"""The Celery app. Configuration lives in Django settings under the CELERY_ prefix.

Production: ``celery -A config worker`` and ``celery -A config beat --scheduler
django_celery_beat.schedulers:DatabaseScheduler`` with REDIS_URL set. Embedded mode:
both run in threads of the web process (config/embedded.py).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_shutting_down
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
