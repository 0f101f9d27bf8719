"""tests/threads.py: a test's thread that used the ORM leaves no connection open, however
its target ends, and the net under every test closes what a plain thread left."""

from __future__ import annotations

import threading

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from accounts.models import User
from tests.threads import DatabaseThread, connections_of_finished_threads_closed

pytestmark = pytest.mark.django_db(transaction=True)


def connection_used_in(thread_class: type[threading.Thread], *, fail: bool = False) -> BaseDatabaseWrapper:
    used: list[BaseDatabaseWrapper] = []

    def query() -> None:
        User.objects.count()
        used.append(connections[DEFAULT_DB_ALIAS])  # this thread's own
        if fail:
            raise RuntimeError("the target failed")

    thread = thread_class(target=query)
    thread.start()
    thread.join(10)
    [wrapper] = used
    return wrapper


def test_a_database_thread_closes_its_connection() -> None:
    assert connection_used_in(DatabaseThread).connection is None


def test_a_database_thread_closes_its_connection_when_its_target_raises(monkeypatch) -> None:
    monkeypatch.setattr(threading, "excepthook", lambda args: None)
    assert connection_used_in(DatabaseThread, fail=True).connection is None


def test_the_net_closes_what_a_finished_plain_thread_left_open() -> None:
    with connections_of_finished_threads_closed():
        wrapper = connection_used_in(threading.Thread)
        # Why DatabaseThread exists: nothing closes a thread's connection but that thread.
        assert wrapper.connection is not None
    assert wrapper.connection is None


def test_the_net_leaves_a_running_threads_connection_alone() -> None:
    opened = threading.Event()
    finish = threading.Event()
    used: list[BaseDatabaseWrapper] = []

    def hold() -> None:
        User.objects.count()
        used.append(connections[DEFAULT_DB_ALIAS])
        opened.set()
        finish.wait(10)

    thread = DatabaseThread(target=hold)
    with connections_of_finished_threads_closed():
        thread.start()
        assert opened.wait(10)
    try:
        assert used[0].connection is not None
    finally:
        finish.set()
        thread.join(10)
    assert used[0].connection is None
