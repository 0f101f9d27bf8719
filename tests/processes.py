"""The production topology as real processes, for end-to-end and fault tests.

``ProductionStack`` starts the ``Procfile`` under supervisord exactly as ``make up-prod``
does (deploy/supervise.py: daphne, a Celery worker, celery beat); ``RedisServer`` is a
private ``redis-server`` a test may stop and start again without touching the shared
one; ``ApiClient`` and ``open_task_socket`` are the plain HTTP and websocket clients a
script would use.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from tests.paths import searchable_by_sandbox
from tests.workers import subprocess_database_url

BIN = Path(sys.executable).parent
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
# Long and random enough for the production settings' check; used by these processes only.
STACK_SECRET_KEY = "topology-test-secret-key-0f6b1d2c9a8e7f5b4c3d2e1f0a9b8c7d"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float, why: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s. {why()}")
        time.sleep(0.1)


# --- Processes ----------------------------------------------------------------------


def _parent_pids() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, their children, ...)."""
    parents = _parent_pids()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def is_running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may be slow to reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _kill(pids: set[int]) -> None:
    for pid in pids:
        if is_running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass
class RedisServer:
    """A private, memory-only redis-server on a port of its own."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.workdir / "redis.log").open("ab")
        command = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--dir", str(self.workdir)]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        wait_for(self.answers, timeout=10, why=lambda: (self.workdir / "redis.log").read_text(errors="replace"))

    def stop(self) -> None:
        """SIGTERM, as an operator's ``systemctl stop`` sends; waits until it has gone."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def kill(self) -> None:
        """SIGKILL, as the OOM killer sends: clients get no goodbye."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait(10)

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False


@dataclass
class ProductionStack:
    """``deploy/supervise.py``: the Procfile's daphne, Celery worker and celery beat
    under supervisord, which restarts any that exits."""

    port: int
    log: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    children: set[int] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        # The log is opened for appending: supervisord's own lines and its programs'
        # output go to the same file through separate descriptors.
        command = [sys.executable, "deploy/supervise.py", "--dir", str(self.log.with_name("supervisor"))]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=settings.BASE_DIR, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def log_tail(self, chars: int = 6000) -> str:
        return "Process log:\n" + self.log.read_text(errors="replace")[-chars:]

    def programs(self) -> dict[str, int]:
        """The Procfile's running processes (supervisord's children) by name."""
        assert self.process is not None
        names = {"daphne": "web", "celery -A config worker": "worker", "celery -A config beat": "beat"}
        found: dict[str, int] = {}
        for pid, parent in _parent_pids().items():
            if parent == self.process.pid and is_running(pid):
                line = command_line(pid)
                found.update({name: pid for program, name in names.items() if program in line})
        return found

    def health(self) -> tuple[int, dict[str, Any]]:
        return ApiClient(self.base_url).request("GET", "/healthz", timeout=5)

    def wait_healthy(self, timeout: float = 40) -> dict[str, Any]:
        """Until /healthz answers 200 with a live worker (its heartbeat is in Redis)."""
        seen: dict[str, Any] = {}

        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(f"supervisord exited with {self.process.returncode}. {self.log_tail()}")
            try:
                status, body = self.health()
            except OSError:
                return False
            seen.update(body if isinstance(body, dict) else {})
            return status == 200 and bool(body.get("worker", {}).get("ok"))

        wait_for(ready, timeout, why=lambda: f"last /healthz: {seen}. {self.log_tail()}")
        assert self.process is not None
        # All three are up now (the worker's pool children too): remember them, to check
        # that a stop leaves none behind.
        self.children = descendants(self.process.pid)
        return seen

    def terminate(self, timeout: float = 30) -> set[int]:
        """SIGTERM to supervisord, as Ctrl-C or ``docker stop`` would; returns the
        processes still running afterwards (none, if the stop works)."""
        if self.process is None:
            return set()
        self.children |= descendants(self.process.pid)
        self.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        deadline = time.monotonic() + 5
        while any(is_running(pid) for pid in self.children) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {pid for pid in self.children if is_running(pid)}

    def kill(self) -> None:
        """Cleanup after a failure: nothing of this stack may outlive the test."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.children |= descendants(self.process.pid)
        _kill(self.children)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def stack_env(*, port: int, redis_url: str, queue: str, llm_url: str, workdir: Path, **extra: str) -> dict[str, str]:
    """The environment of ``make up-prod``: production settings (not the test ones),
    the test database, a Redis and a queue of the test's own, the fake LLM."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "DEBUG": "false",
            "SECRET_KEY": STACK_SECRET_KEY,
            "DATABASE_URL": subprocess_database_url(),
            "REDIS_URL": redis_url,
            "CELERY_QUEUE": queue,
            # Redis pub/sub is shared by every client of the server: this stack's own.
            "CHANNEL_LAYER_PREFIX": queue,
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "SESSION_COOKIE_SECURE": "false",
            "EMBEDDED_WORKER": "false",
            "ANTHROPIC_BASE_URL": llm_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-key",
            "LLM_PROVIDER": "anthropic",
            "REPOS_ROOT": str(searchable_by_sandbox(workdir) / "repos"),
            "WORKTREES_ROOT": str(workdir / "worktrees"),
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    return env


# --- Clients ------------------------------------------------------------------------


@dataclass
class ApiClient:
    """JSON over HTTP with urllib: what a script talks to the API with."""

    base_url: str
    token: str = ""

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10
    ) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        return self.request("POST", path, body)

    def sign_up(self, email: str, password: str) -> None:
        """Register, then take an API token for the rest of the requests."""
        status, body = self.post("/api/auth/register", {"email": email, "password": password})
        assert status == 201, body
        status, body = self.post("/api/auth/token", {"email": email, "password": password})
        assert status == 201, body
        self.token = body["token"]


def open_task_socket(stack: ProductionStack, token: str, task_id: int, last_event_id: int = 0) -> ClientConnection:
    """``/ws/tasks/<id>`` as a script opens it: same-origin, ``Authorization: Token``."""
    query = f"?last_event_id={last_event_id}" if last_event_id else ""
    return connect(
        f"ws://127.0.0.1:{stack.port}/ws/tasks/{task_id}{query}",
        origin=Origin(stack.base_url),
        additional_headers={"Authorization": f"Token {token}"},
        proxy=None,
        open_timeout=10,
        # A test may read a socket long after its events came: buffer them all, rather
        # than stop reading (and answering pings) once 16 wait.
        max_queue=None,
    )


def receive_until(
    socket_: ClientConnection, done: Callable[[dict[str, Any]], bool], timeout: float, why: Callable[[], str] = str
) -> list[dict[str, Any]]:
    """Messages (keepalive pings left out) up to and including the first ``done`` one."""
    received: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"no final message within {timeout} s; got {[m['type'] for m in received]}. {why()}")
        try:
            message = json.loads(socket_.recv(timeout=left))
        except TimeoutError:
            continue
        if message.get("type") == "ping":
            continue
        received.append(message)
        if done(message):
            return received
