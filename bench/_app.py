"""The app as the benchmarks that drive it from outside run it (bench_events.py,
bench_concurrency.py): its environment against the fake LLM, daphne on a free port,
/healthz until its worker answers, JSON over HTTP, a signed-up user's token, and its
processes stopped."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable

from _common import ROOT

PASSWORD = "bench password 123"


_handed_out: set[int] = set()


def free_port() -> int:
    """A free port: one of ``BENCH_PORTS`` ("8200-8299") when set (several benchmarks
    share a machine, each in its own range), not handed out before (its server may not
    have bound it yet), else any the system picks."""
    first, _, last = os.environ.get("BENCH_PORTS", "").partition("-")
    candidates = [p for p in range(int(first), int(last or first) + 1) if p not in _handed_out] if first else [0]
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return int(sock.getsockname()[1])
    raise RuntimeError(f"no free port in BENCH_PORTS={os.environ['BENCH_PORTS']}")


def paced_model_arguments(p: argparse.ArgumentParser, *, seconds: float) -> None:
    """A benchmark's fake model streaming at a model's pace: how long, how fast, and the
    hidden ``--serve-llm PORT`` that runs it (``paced_model_started``)."""
    p.add_argument("--seconds", type=float, default=seconds)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--serve-llm", type=int, help=argparse.SUPPRESS)


def paced_model_started(script: str, seconds: float, rate: float) -> tuple[subprocess.Popen[bytes], int]:
    """``script`` again with ``--serve-llm``: its fake model in a process of its own, so
    that its streams do not share the measuring process's interpreter; (process, port)
    once it serves."""
    port = free_port()
    command = [sys.executable, script, "--serve-llm", str(port), "--seconds", str(seconds), "--rate", str(rate)]
    llm = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE)
    assert llm.stdout is not None
    llm.stdout.readline()
    return llm, port


def http(url: str, body: dict | None = None, token: str = "", timeout: float = 30) -> dict:
    """GET ``url``, or POST ``body`` as JSON; the answer's JSON."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    if body is not None:
        request.method = "POST"
    if token:
        request.add_header("Authorization", f"Token {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def app_environment(llm_url: str) -> dict[str, str]:
    """The app's environment against the fake LLM at ``llm_url``, with no limit on runs at
    once (the benchmarks measure runs side by side, not their wait for a place in line);
    the caller adds the database, Redis and the worker's settings."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "DEBUG": "true",
        "ANTHROPIC_BASE_URL": llm_url,
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "LOG_LEVEL": "WARNING",
        "SESSION_COOKIE_SECURE": "false",
        "RUNS_AT_ONCE_PER_USER": "1000",
        "RUNS_AT_ONCE_PER_PROJECT": "1000",
    }


def daphne_started(port: int, env: dict[str, str], processes: int = 0) -> subprocess.Popen[bytes]:
    """The database migrated, then daphne serving the app on ``port``: one process, or
    ``processes`` of them sharing the port as the production topology starts them
    (deploy/web.py)."""
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    if processes:
        web = [python, "deploy/web.py", "--host", "127.0.0.1", "--port", str(port), "--processes", str(processes)]
        return subprocess.Popen([*web, "config.asgi:application"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    daphne = [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]
    return subprocess.Popen(daphne, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found = [pid]
    for parent in found:
        found += [child for child, its_parent in parents.items() if its_parent == parent]
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time the live processes ``pids`` have used so far."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


def wait_healthy(url: str, timeout: float) -> None:
    """Until the app at ``url`` says its worker is up; RuntimeError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
                if json.load(response)["worker"]["ok"]:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the app did not become healthy")
        time.sleep(0.3)


def signed_up_token(url: str, *, wait: float = 0.0) -> str:
    """A new user's API token; the sign-up is tried again for ``wait`` seconds while the
    server is not yet listening."""
    email = f"bench-{uuid.uuid4().hex[:6]}@example.com"
    deadline = time.monotonic() + wait
    while True:
        try:
            http(url + "/api/auth/register", {"email": email, "password": PASSWORD})
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    return http(url + "/api/auth/token", {"email": email, "password": PASSWORD})["token"]


def processes_stopped(processes: Iterable[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM to each, then each waited for ``timeout`` s and killed if still running."""
    processes = list(processes)
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
