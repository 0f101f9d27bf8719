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


class Pid(int):
    """A process id that remembers when its process started (``/proc/<pid>/stat``'s
    starttime): pids wrap at 32,768 here, and a test's clean-up that killed a pid it saw
    minutes ago killed another test's process that had been given the same number."""

    started: str

    def __new__(cls, pid: int, started: str) -> Pid:
        made = super().__new__(cls, pid)
        made.started = started
        return made


def _stat_fields(pid: int) -> list[str] | None:
    """The fields after "pid (comm)" — comm may hold spaces and parentheses — or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _parent_pids() -> dict[Pid, int]:
    parents: dict[Pid, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:  # state, ppid, ... starttime is the 20th after comm
            parents[Pid(int(entry.name), fields[19])] = int(fields[1])
    return parents


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, their children, ...), as ``Pid``s."""
    parents = _parent_pids()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def is_same_process(pid: int) -> bool:
    """``pid`` still names the process it named when it was found (a ``Pid``), alive."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return not isinstance(pid, Pid) or fields[19] == pid.started


def kill_found(pids: set[int]) -> None:
    """SIGKILL each of ``pids`` (found by ``descendants``) that is still the process it
    was, never a newer one given the same number."""
    for pid in pids:
        if is_same_process(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


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


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    return inodes


def tcp_peer_owners(pids: set[int]) -> dict[tuple[str, int], int]:
    """Which of ``pids`` holds the IPv4 TCP connection from each peer address: what a
    client socket's ``getsockname()`` maps to (from /proc/net/tcp and each process's fds)."""
    owner_of_inode = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    owners: dict[tuple[str, int], int] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, inode = fields[2], fields[9]
        if inode in owner_of_inode:
            address, port = remote.split(":")
            ip = socket.inet_ntoa(int(address, 16).to_bytes(4, "little"))
            owners[(ip, int(port, 16))] = owner_of_inode[inode]
    return owners


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
        # The worker: deploy/workers.py starting WORKER_PROCESSES celery workers, or, for
        # one, become that worker (exec).
        names = {
            "deploy/web.py": "web",
            "deploy/workers.py": "worker",
            "celery -A config worker": "worker",
            "celery -A config beat": "beat",
        }
        found: dict[str, int] = {}
        for pid, parent in _parent_pids().items():
            if parent == self.process.pid and is_running(pid):
                line = command_line(pid)
                found.update({name: pid for program, name in names.items() if program in line})
        return found

    def web_processes(self) -> set[int]:
        """The daphne processes serving the port (deploy/web.py's children)."""
        web = self.programs()["web"]
        return {pid for pid in descendants(web) if "-m daphne" in command_line(pid)}

    def health(self) -> tuple[int, dict[str, Any]]:
        return ApiClient(self.base_url).request("GET", "/healthz", timeout=5)

    def wait_healthy(self, timeout: float = 120) -> dict[str, Any]:
        """Until /healthz answers 200 with a live worker (its heartbeat is in Redis). A
        whole stack starts in about 10 s on a quiet machine; on a loaded CI box its worker
        alone took over 40."""
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
        while any(is_same_process(pid) for pid in self.children) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {pid for pid in self.children if is_same_process(pid)}

    def kill(self) -> None:
        """Cleanup after a failure: nothing of this stack may outlive the test."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.children |= descendants(self.process.pid)
        kill_found(self.children)
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
            # One worker process unless the test asks for more (WORKER_PROCESSES defaults
            # to the machine's cores): the fault tests stop and watch "the" worker.
            "WORKER_PROCESSES": "1",
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
