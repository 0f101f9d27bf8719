"""Threads that tests start to use the ORM beside the test's own thread.

Django opens a connection per thread and nothing but that thread closes it. One left
open keeps the PostgreSQL test database in use, and dropping it at the end of the
session fails ("database is being accessed by other users").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created


class DatabaseThread(threading.Thread):
    """A ``threading.Thread`` that closes its own database connections when its target
    returns or raises: the way for a test to start a thread that uses the ORM."""

    def run(self) -> None:
        try:
            super().run()
        finally:
            connections.close_all()


@contextmanager
def connections_of_finished_threads_closed() -> Iterator[None]:
    """At the end, close the connections that other threads opened inside the block and
    left open when they finished (a plain ``threading.Thread``, a stopped worker's pool).
    Threads still running keep theirs: closing a connection under its thread would break
    it. conftest.py wraps every test in this, as a net under ``DatabaseThread``."""
    own_thread = threading.current_thread()
    opened: list[tuple[threading.Thread, BaseDatabaseWrapper]] = []

    def record(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        if threading.current_thread() is not own_thread:
            opened.append((threading.current_thread(), connection))

    connection_created.connect(record, weak=False)
    try:
        yield
    finally:
        connection_created.disconnect(record)
        for thread, wrapper in opened:
            if not thread.is_alive() and wrapper.connection is not None:
                # The thread that owned it is gone: nobody else can use it meanwhile.
                wrapper.inc_thread_sharing()
                try:
                    wrapper.close()
                finally:
                    wrapper.dec_thread_sharing()
