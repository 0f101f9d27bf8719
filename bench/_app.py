"""The app as the benchmarks that drive it from outside run it (bench_events.py,
bench_concurrency.py): its environment against the fake LLM, daphne on a free port,
/healthz until its worker answers, JSON over HTTP, a signed-up user's token, and its
processes stopped."""

from __future__ import annotations

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def daphne_started(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The database migrated, then daphne serving the app on ``port``."""
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    daphne = [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]
    return subprocess.Popen(daphne, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)


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
