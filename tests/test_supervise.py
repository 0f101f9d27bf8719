"""deploy/supervise.py, which `make up-prod` runs: the Procfile's processes under
supervisord. A process that exits comes back, the others keep running (the same PIDs),
and SIGTERM stops them all. Small stand-in processes here; tests/test_topology_e2e.py
kills the real worker of the real stack."""

from __future__ import annotations

import configparser
import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.supervise import ROOT, read_procfile, supervisord_config
from tests.processes import command_line, descendants, is_running, is_same_process, kill_found, wait_for

SLEEPER = "sleep 600"


def test_the_procfile_is_read_in_order_without_its_comments(tmp_path: Path) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text("# the processes\nweb: daphne -p ${PORT:-8000} app\n\n  worker:   celery worker  \n")
    assert read_procfile(procfile) == {"web": "daphne -p ${PORT:-8000} app", "worker": "celery worker"}
    assert list(read_procfile(ROOT / "Procfile")) == ["web", "worker", "beat"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [("web daphne\n", "expected 'name: command'"), ("a: x\na: y\n", "defined twice"), ("# nothing\n", "no processes")],
)
def test_a_broken_procfile_is_refused_with_the_line(tmp_path: Path, text: str, problem: str) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text(text)
    with pytest.raises(ValueError, match=problem):
        read_procfile(procfile)


def test_each_process_runs_through_the_shell_restarts_and_stops_with_its_group(tmp_path: Path) -> None:
    processes = {"web": "daphne -p ${PORT:-8000} config.asgi:application", "worker": "python -c 'print(\"100%\")'"}
    text = supervisord_config(processes, workdir=tmp_path, directory=ROOT)
    # Read as supervisord reads it (%(name)s interpolation): the commands come back whole.
    config = configparser.ConfigParser(defaults={"here": str(tmp_path)})
    config.read_string(text)
    assert config.get("supervisord", "nodaemon") == "true"
    assert config.get("supervisord", "pidfile") == str(tmp_path / "supervisord.pid")
    for name, command in processes.items():
        section = f"program:{name}"
        assert config.get(section, "command") == f"/bin/sh -c {_quoted(f'exec {command}')}"
        assert config.get(section, "directory") == str(ROOT)
        assert config.get(section, "autorestart") == "true"
        assert config.get(section, "stopasgroup") == config.get(section, "killasgroup") == "true"
    assert config.get("program:worker", "stopwaitsecs") == "30", "running phases get time to hand their work back"


def _is_python(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name.startswith("python")
    except OSError:  # gone meanwhile
        return False


def _quoted(text: str) -> str:
    return shlex.quote(text)


@dataclass
class Supervisor:
    process: subprocess.Popen[bytes]
    log: Path

    def programs(self) -> dict[str, int]:
        """The running stand-ins by name: the Python processes whose command lines name
        them. Only Python: on the way to it a pyenv shim (a bash script) forks subshells
        that carry the same command line for a moment, and one was once taken for the
        stand-in (then gone, as if supervisord had restarted it)."""
        found: dict[str, int] = {}
        for pid in descendants(self.process.pid):
            match = re.search(r"stand-in=(\w+)", command_line(pid))
            if match and is_running(pid) and _is_python(pid):
                found[match.group(1)] = pid
        return found

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def all_running(self, names: tuple[str, ...] = ("web", "worker", "beat")) -> dict[str, int]:
        """``programs()`` once every one of ``names`` is seen. One reading of /proc can
        miss a live process (it was seen once under CI's load with the other two there):
        the pids compared must come from a reading that has them all."""
        seen: dict[str, int] = {}

        def complete() -> bool:
            nonlocal seen
            seen = self.programs()
            return set(names) <= set(seen)

        wait_for(complete, timeout=20, why=lambda: f"running: {seen}\n{self.log_text()}")
        return seen


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Supervisor]:
    procfile = tmp_path / "Procfile"
    # Double quotes: the shell expands ${GREETING:-hello} as it would a Procfile's ${PORT}.
    stand_in = "{name}: python3 -c \"import time; print('{name} up, ${{GREETING:-hello}}', flush=True); "
    stand_in += 'time.sleep(600)" stand-in={name}\n'
    procfile.write_text(
        "# stand-ins for web, worker and beat\n"
        + "".join(stand_in.format(name=name) for name in ("web", "worker", "beat"))
        + "crasher: sh -c 'echo crashing; exit 3' stand-in=crasher\n"
    )
    log = tmp_path / "supervise.log"
    command = [sys.executable, str(ROOT / "deploy" / "supervise.py"), "--procfile", str(procfile)]
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*command, "--dir", str(tmp_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GREETING": "hi"},
        )
    supervisor = Supervisor(process=process, log=log)
    try:
        yield supervisor
    finally:
        if process.poll() is None:
            left = descendants(process.pid)
            process.kill()
            process.wait(10)
            kill_found(left)


@pytest.mark.slow
def test_a_killed_process_comes_back_the_others_keep_running_and_sigterm_stops_all(supervise: Supervisor) -> None:
    before = supervise.all_running()
    # The environment reaches the processes through the shell, as under honcho.
    wait_for(lambda: "worker up, hi" in supervise.log_text(), timeout=10, why=supervise.log_text)

    os.kill(before["worker"], signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(
        lambda: supervise.programs().get("worker") not in (None, before["worker"]),
        timeout=10,
        why=supervise.log_text,
    )
    print(f"worker started again {time.monotonic() - killed_at:.1f} s after it was killed")
    supervise.all_running()
    # The others were left alone: the very processes seen before still run (a new
    # reading of /proc is not compared: it can name a passing process of the same name).
    assert is_same_process(before["web"]) and is_same_process(before["beat"]), (
        f"the others were left alone\n{supervise.log_text()}"
    )
    assert "exited: worker (terminated by SIGKILL; not expected)" in supervise.log_text(), "it says why"
    assert supervise.process.poll() is None

    # A process that keeps failing at start is retried, each time a little later,
    # while the others run on.
    wait_for(
        lambda: len(re.findall(r"spawned: 'crasher'", supervise.log_text())) >= 4, timeout=20, why=supervise.log_text
    )
    spawns = re.findall(r"^\S+ (\S+) INFO spawned: 'crasher'", supervise.log_text(), re.MULTILINE)
    seconds = [_seconds(stamp) for stamp in spawns[:4]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(seconds)]
    assert gaps[-1] > gaps[0] + 0.5, f"retries back off: {gaps}"
    assert "exited: crasher (exit status 3; not expected)" in supervise.log_text()
    assert supervise.all_running()["web"] == before["web"]

    children = descendants(supervise.process.pid)
    supervise.process.send_signal(signal.SIGTERM)
    assert supervise.process.wait(30) == 0
    wait_for(lambda: not any(is_same_process(pid) for pid in children), timeout=5)
    assert "received SIGTERM indicating exit request" in supervise.log_text()


def _seconds(stamp: str) -> float:
    hours, minutes, seconds = stamp.replace(",", ".").split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
