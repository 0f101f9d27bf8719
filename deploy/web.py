"""Several daphne processes serving one port, so that websocket work spreads over the cores.

daphne has no ``--workers``, and one process does every socket's work: with 200 pages on
one run, or 50 runs watched by two pages each, that one process's CPU set the latency
(bench/bench_events.py). This launcher opens the listening socket once and starts
``WEB_PROCESSES`` daphne processes (default: the number of cores) that all accept from it
(``--endpoint fd:fileno=N``: daphne adopts the inherited socket). The kernel gives each new
connection to one of the processes waiting in accept, so a busy one takes fewer.

A run's pages then land on different processes. Each process subscribes to Redis for the
groups of its own sockets and fans an event out to them (config/pubsub_layer.py), so every
page gets every event whichever process holds it.

A process that exits is started again, a second later (longer while it keeps dying at
once); the others keep serving the port meanwhile. SIGTERM or SIGINT goes to every
process, SIGKILL after STOP_GRACE_SECONDS. The embedded mode (no ``REDIS_URL``: worker
and channel layer inside the server process) must stay one process, and is refused more.

    python deploy/web.py [--host 127.0.0.1] [--port 8000] [--processes N] [daphne options] config.asgi:application

Standard library only: it runs before Django is set up.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

# A process that stays up this long has started; one that dies sooner waits 1, 2, 3, ...
# seconds longer each time before it is started again (as deploy/supervise.py).
STARTED_AFTER_SECONDS = 5.0
MAX_RESTART_DELAY_SECONDS = 30.0
STOP_GRACE_SECONDS = 10.0
# Connections the kernel queues before the processes accept them (a page load opens several).
LISTEN_BACKLOG = 1024


def process_count(requested: str | None, environ: dict[str, str] | os._Environ[str]) -> int:
    """How many daphne processes: ``requested`` (--processes or WEB_PROCESSES), else one per
    core; exactly one in the embedded mode. SystemExit with the reason on a bad value."""
    embedded = not environ.get("REDIS_URL") or environ.get("EMBEDDED_WORKER", "").lower() in {"1", "true", "yes", "on"}
    if not requested:
        # The cores this process may run on (a container's CPU set), not the machine's.
        return 1 if embedded else len(os.sched_getaffinity(0))
    try:
        count = int(requested)
    except ValueError:
        count = 0
    if count < 1:
        raise SystemExit(f"web: WEB_PROCESSES must be a whole number of at least 1, not {requested!r}")
    if count > 1 and embedded:
        raise SystemExit(
            "web: the embedded mode (no REDIS_URL, or EMBEDDED_WORKER on) runs the worker and the channel layer "
            "inside the one server process: it cannot be split over processes. Set WEB_PROCESSES=1 or use Redis."
        )
    return count


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket every process accepts from, inheritable by them. IPv4 only: daphne's
    ``--fd`` adopts the descriptor as an AF_INET socket (its endpoint parser takes no
    other family from the command line)."""
    if ":" in host:
        raise SystemExit(f"web: {host} is an IPv6 address; daphne's --fd takes IPv4 sockets only (use 0.0.0.0)")
    sock = socket.create_server((host, port), backlog=LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def daphne_command(sock: socket.socket, daphne_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), *daphne_args]


class WebProcesses:
    """``count`` daphne processes on ``sock``, each started again when it exits."""

    def __init__(self, sock: socket.socket, count: int, command: list[str]) -> None:
        self.sock = sock
        self.command = command
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self.started_at = [0.0] * count
        self.quick_deaths = [0] * count
        self.next_start = [0.0] * count
        self.stopping = threading.Event()

    def start(self, index: int) -> None:
        # The command is this launcher's own (daphne and its options), no shell.
        self.processes[index] = subprocess.Popen(self.command, pass_fds=(self.sock.fileno(),))  # noqa: S603
        self.started_at[index] = time.monotonic()

    def check(self) -> None:
        """Start again the processes that exited, once their delay has passed."""
        now = time.monotonic()
        for index, process in enumerate(self.processes):
            if process is not None and process.poll() is None:
                continue
            if process is not None:
                lived = now - self.started_at[index]
                self.quick_deaths[index] = self.quick_deaths[index] + 1 if lived < STARTED_AFTER_SECONDS else 0
                delay = min(1.0 + self.quick_deaths[index], MAX_RESTART_DELAY_SECONDS)
                print(
                    f"web: process {index} (pid {process.pid}) exited with {process.returncode}; "
                    f"starting it again in {delay:g} s",
                    file=sys.stderr,
                    flush=True,
                )
                self.processes[index] = None
                self.next_start[index] = now + delay
            if now >= self.next_start[index]:
                self.start(index)

    def run(self) -> None:
        for index in range(len(self.processes)):
            self.start(index)
        while not self.stopping.wait(0.2):
            self.check()
        self.stop()

    def stop(self) -> None:
        running = [process for process in self.processes if process is not None and process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument(
        "--processes", default=os.environ.get("WEB_PROCESSES"), help="default: WEB_PROCESSES, else one per core"
    )
    args, daphne_args = parser.parse_known_args(argv)
    if not daphne_args:
        parser.error("the ASGI application is missing (config.asgi:application)")
    count = process_count(args.processes, os.environ)
    sock = listening_socket(args.host, args.port)
    web = WebProcesses(sock, count, daphne_command(sock, daphne_args))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: web.stopping.set())
    print(f"web: {count} daphne processes on {args.host}:{args.port}", file=sys.stderr, flush=True)
    web.run()


if __name__ == "__main__":
    main()
