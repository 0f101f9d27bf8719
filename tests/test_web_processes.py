"""deploy/web.py: several daphne processes accepting from one port, each started again when
it exits, all stopped by SIGTERM; the embedded mode kept to one. The processes here serve
a stand-in ASGI app that answers with its process id; tests/test_topology_e2e.py runs the
real app this way and checks that a run's events reach the pages of every process."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.supervise import ROOT
from deploy.web import process_count
from tests.processes import command_line, descendants, free_port, is_same_process, kill_found, wait_for

PRODUCTION = {"REDIS_URL": "redis://127.0.0.1:6379/0"}


def test_one_process_per_core_by_default_and_exactly_one_in_the_embedded_mode() -> None:
    assert process_count(None, PRODUCTION) == len(os.sched_getaffinity(0))
    assert process_count("3", PRODUCTION) == 3
    assert process_count(None, {}) == 1
    assert process_count("1", {}) == 1
    assert process_count(None, PRODUCTION | {"EMBEDDED_WORKER": "true"}) == 1


@pytest.mark.parametrize(
    ("requested", "environ", "message"),
    [
        ("0", PRODUCTION, "at least 1"),
        ("two", PRODUCTION, "at least 1"),
        ("2", {}, "embedded mode"),
        ("2", PRODUCTION | {"EMBEDDED_WORKER": "on"}, "embedded mode"),
    ],
)
def test_a_bad_or_impossible_count_stops_with_the_reason(requested: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        process_count(requested, environ)


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    port = free_port()
    log = tmp_path / "web.log"
    app = tmp_path / "pid_app.py"
    app.write_text(
        "import os\n"
        "async def application(scope, receive, send):\n"
        "    if scope['type'] != 'http':\n"
        "        return\n"
        "    await send({'type': 'http.response.start', 'status': 200, 'headers': []})\n"
        "    await send({'type': 'http.response.body', 'body': str(os.getpid()).encode()})\n"
    )
    env = {**os.environ, **PRODUCTION, "PYTHONPATH": str(tmp_path)}
    command = [sys.executable, "deploy/web.py", "--port", str(port), "--processes", "2", "pid_app:application"]
    with log.open("ab") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process, port, log
    finally:
        children = descendants(process.pid)
        if process.poll() is None:
            process.kill()
            process.wait(10)
        kill_found(children)


def _served_by(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
        return int(response.read())


def _serving(port: int) -> set[int]:
    """The processes that answered a burst of concurrent requests (errors while one is
    down are retried by the caller's wait)."""
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = pool.map(lambda _: _try_served_by(port), range(40))
        return {pid for pid in answers if pid}


def _try_served_by(port: int) -> int:
    try:
        return _served_by(port)
    except OSError:
        return 0


@pytest.mark.slow
def test_the_processes_share_the_port_and_one_that_dies_comes_back(
    web: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    process, port, log = web
    daphnes: set[int] = set()

    def two_daphnes() -> bool:
        daphnes.clear()
        daphnes.update(pid for pid in descendants(process.pid) if "-m daphne" in command_line(pid))
        return len(daphnes) == 2 and _try_served_by(port) != 0

    wait_for(two_daphnes, timeout=60, why=lambda: log.read_text(errors="replace"))
    assert all("--fd" in command_line(pid) for pid in daphnes)
    answered: set[int] = set()

    def both_answer() -> bool:
        answered.update(_serving(port))
        return answered == daphnes

    wait_for(both_answer, timeout=30, why=lambda: f"answered by {answered} of {daphnes}")

    killed, kept = sorted(daphnes)
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: not is_same_process(killed), timeout=10)
    # The other process keeps serving the port meanwhile.
    assert _served_by(port) == kept
    restarted: set[int] = set()

    def back() -> bool:
        restarted.update(pid for pid in descendants(process.pid) if "-m daphne" in command_line(pid))
        restarted.discard(killed)
        return len(restarted) == 2

    wait_for(back, timeout=30, why=lambda: log.read_text(errors="replace"))
    assert kept in restarted
    answered.clear()
    daphnes = restarted
    wait_for(both_answer, timeout=30, why=lambda: f"answered by {answered} of {daphnes}")
    assert f"process 0 (pid {killed})" in log.read_text() or f"process 1 (pid {killed})" in log.read_text()

    everything = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0
    wait_for(lambda: not any(is_same_process(pid) for pid in everything), timeout=10)
