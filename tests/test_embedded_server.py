"""The embedded mode end to end: a real daphne process, as `make run` starts it.

Its beat thread finds a due job, its worker thread runs it against SQLite, and Ctrl-C
(or SIGTERM, as `docker stop` sends) ends the process promptly.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

# Run in a child: migrate, then make the session job due and leave sessions to clear.
PREPARE = """
from datetime import timedelta
import django
django.setup()
from django.conf import settings
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import ModelEntry
from config.celery import app

call_command("migrate", verbosity=0)
name = "clear-expired-sessions"
ModelEntry.from_entry(name, app=app, **settings.CELERY_BEAT_SCHEDULE[name])
now = timezone.now()
PeriodicTask.objects.filter(name=name).update(last_run_at=now - timedelta(hours=2))
Session.objects.create(session_key="expired".ljust(32, "x"), session_data="", expire_date=now - timedelta(hours=1))
Session.objects.create(session_key="live".ljust(32, "x"), session_data="", expire_date=now + timedelta(hours=1))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def session_keys(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {key.rstrip("x") for (key,) in conn.execute("SELECT session_key FROM django_session")}


def wait_until(condition: Callable[[], bool], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s. Server log:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.05)


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1)
    except urllib.error.HTTPError:
        return True  # any HTTP answer will do
    except OSError:
        return False
    return True


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_daphne_runs_beat_and_worker_in_process_and_stops_promptly(tmp_path: Path, stop_signal: int) -> None:
    db = tmp_path / "db.sqlite3"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{db}",
        # Embedded: whatever this test run uses, the child has no Redis.
        "REDIS_URL": "",
        "EMBEDDED_WORKER": "",
        "LOG_LEVEL": "INFO",
    }
    subprocess.run([sys.executable, "-c", PREPARE], cwd=settings.BASE_DIR, env=env, check=True, timeout=120)
    assert session_keys(db) == {"expired", "live"}

    port = free_port()
    log = tmp_path / "daphne.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            # A shell running us in the background may ignore SIGINT; Ctrl-C would not.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/"), timeout=30, log=log)
        assert "Embedded Celery worker started" in log.read_text()
        # Beat ticks every second: the due job is sent and run within a few.
        wait_until(lambda: session_keys(db) == {"live"}, timeout=15, log=log)

        sent_at = time.monotonic()
        server.send_signal(stop_signal)
        server.wait(15)
        took = time.monotonic() - sent_at
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    output = log.read_text()
    assert "Embedded Celery worker and beat stopped" in output, output
    # Not Celery's 30 s wait for running tasks; the margin is for a loaded machine
    # (the worker and beat alone stop in about 1 s, logged above).
    assert took < 6, f"took {took:.2f} s to exit\n{output}"
    assert "Traceback" not in output, output
