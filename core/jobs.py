"""Queueing an app's Celery tasks from its services, by the task's name.

The convention (Django-Styleguide): a ``tasks.py`` module is thin and imports the service
it runs inside the task function; a service that queues a task does so on commit. The
service names the task (``"pipelines.tasks.pipeline_advance"``) instead of importing
``tasks.py``: the task runs the service, so an import back would close an import cycle
(services → tasks → services), lazy or not. The name is the task's public contract
anyway (the beat schedule and the broker's messages use it), and ``job`` fails loudly
(``NotRegistered``) for a name no task has.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import current_app
from celery.exceptions import NotRegistered
from django.db import transaction

_discover_lock = threading.Lock()


def job(name: str) -> Any:
    """The registered task called ``name`` (its ``delay``/``apply_async`` queue it).

    A worker knows every task from its start; a web process learns them here, the first
    time one is asked for, by importing every installed app's ``tasks`` module as the
    worker does (Celery's autodiscovery)."""
    app = current_app
    try:
        return app.tasks[name]
    except NotRegistered:
        with _discover_lock:
            app.autodiscover_tasks(force=True)
        return app.tasks[name]


def enqueue(name: str, *args: Any, countdown: float | None = None) -> None:
    """Queue the task ``name`` with ``args`` now (``countdown``: that many seconds later)."""
    task = job(name)
    if countdown is None:
        task.delay(*args)
    else:
        task.apply_async(args, countdown=countdown)


def enqueue_on_commit(name: str, *args: Any) -> None:
    """Queue the task ``name`` with ``args`` once the current transaction commits (at
    once outside one), so that the worker finds the rows the transaction wrote."""
    transaction.on_commit(lambda: enqueue(name, *args))
