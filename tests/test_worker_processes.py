"""deploy/workers.py, the Procfile's worker command: WORKER_PROCESSES ``celery worker``
processes side by side (the box's cores by default), each with a node name of its own,
one that dies started again, all stopped warm by one SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from deploy.workers import worker_commands
from tests.processes import command_line, descendants, is_same_process, kill_found, wait_for

ROOT = Path(settings.BASE_DIR)
SETTLED = 90  # seconds a step may take on a loaded machine


def test_each_worker_process_runs_the_thread_pool_under_a_node_name_of_its_own() -> None:
    commands = worker_commands(3, ["--loglevel=info"])
    assert len(commands) == 3
    for command in commands:
        assert command[:6] == [sys.executable, "-m", "celery", "-A", "config", "worker"]
        assert "--pool=threads" in command and "--loglevel=info" in command
    names = [command[command.index("-n") + 1] for command in commands]
    assert names == ["worker1@%h", "worker2@%h", "worker3@%h"]
    # One process keeps Celery's own node name (nothing to tell apart).
    assert "-n" not in worker_commands(1, [])[0]


def _settings_worker_processes(value: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE",)}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; print(s.WORKER_PROCESSES)",
        ],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings.base", "DEBUG": "true", "WORKER_PROCESSES": value},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_worker_processes_defaults_to_the_cores_this_process_may_use() -> None:
    assert _settings_worker_processes("").stdout.strip() == str(len(os.sched_getaffinity(0)))
    assert _settings_worker_processes("3").stdout.strip() == "3"
    refused = _settings_worker_processes("0")
    assert refused.returncode != 0 and "WORKER_PROCESSES" in refused.stderr


def _workers(launcher: int) -> dict[str, int]:
    """The launcher's ``celery worker`` processes by node name."""
    found = {}
    for pid in descendants(launcher):
        line = command_line(pid)
        if "celery -A config worker" in line and " -n " in line:
            found[line.split(" -n ", 1)[1].split("@", 1)[0]] = pid
    return found


@pytest.mark.slow
@pytest.mark.own_topology  # the embedded broker and a SQLite file of its own: no Redis needed
def test_the_launcher_starts_worker_processes_workers_restarts_one_that_dies_and_stops_all_on_sigterm(
    tmp_path: Path,
) -> None:
    # The embedded settings' broker (memory://): the workers need no Redis to start.
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "REDIS_URL")}
    env |= {
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "CELERY_QUEUE": f"autocoder-launcher-{uuid.uuid4().hex[:8]}",
        "WORKER_PROCESSES": "2",
        "WORKER_THREADS": "2",
    }
    log = (tmp_path / "workers.log").open("wb")
    launcher = subprocess.Popen(
        [sys.executable, "deploy/workers.py", "--loglevel=info", "--without-heartbeat", "--without-mingle"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def log_text() -> str:
        return (tmp_path / "workers.log").read_text(errors="replace")

    try:

        def ready(name: str) -> int:
            return len(re.findall(rf"{name}@\S+ ready\.", log_text()))

        wait_for(lambda: ready("worker1") == ready("worker2") == 1, SETTLED, log_text)
        before = _workers(launcher.pid)
        assert set(before) == {"worker1", "worker2"}

        os.kill(before["worker2"], signal.SIGKILL)
        wait_for(lambda: ready("worker2") == 2, SETTLED, log_text)
        after = _workers(launcher.pid)
        assert after["worker2"] != before["worker2"], "started again"
        assert after["worker1"] == before["worker1"], "the other worker kept running"
        assert "worker 2 exited" in log_text()

        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(SETTLED) == 0, log_text()
        assert not any(is_same_process(pid) for pid in after.values()), "every worker stopped with it"
        assert log_text().count("Warm shutdown") == 2, log_text()
    finally:
        kill_found(descendants(launcher.pid) if launcher.poll() is None else set())
        if launcher.poll() is None:
            launcher.kill()
        launcher.wait(10)
        log.close()
