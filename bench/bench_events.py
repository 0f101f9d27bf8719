"""Live event latency: an agent-log chunk published by the worker during a real pipeline
run → received by the websocket clients watching it through a real daphne: M clients on
one run for M = 1, 50, 200, then N concurrent runs with 2 clients each (N = 50), against
a raw Redis pub/sub round trip measured in the same run.

--db sqlite: the embedded topology (one daphne process, worker and channel layer in it).
--db postgres: the production topology (daphne + a separate Celery worker process,
PostgreSQL, Redis as broker and channel layer), once per channel layer (--layers): the
product's "pubsub" (config/pubsub_layer.py) and channels-redis's "per-socket" layer, the
baseline it replaced, each with its own daphne and worker (CHANNEL_LAYER=…), and once per
count of web processes (--web-processes: daphne processes sharing the port, deploy/web.py).

Latency = the client's clock at receipt − the event's own timestamp (set when the worker
publishes it, before its transaction commits); same machine, same clock.

Run: .venv/bin/python bench/bench_events.py [--db sqlite|postgres] [--clients 1,50,200]
     [--runs 50] [--layers pubsub,per-socket] [--web-processes 1,2]
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

from _app import (
    app_environment,
    cpu_seconds,
    daphne_started,
    free_port,
    http,
    process_tree,
    processes_stopped,
    signed_up_token,
    wait_healthy,
)
from _common import PG_ADMIN_URL, ROOT, _recreate_postgres, p50, parser, pct, table

REDIS_URL = "redis://127.0.0.1:6379/8"
# A database of this script's own: the other scripts' "bench" is dropped and created again
# by whichever of them starts, and other benchmarks may run on this machine meanwhile.
PG_DATABASE = "bench_events"
# A run's last event when it stops short: an error of one of these types (after its
# phase-change to that status).
STOPPED = {"paused", "failed", "cancelled"}
# 50 worker threads held 50 PostgreSQL connections and, with the other processes on the
# machine, went past max_connections (100): a phase failed and, without beat's sweeper
# here, its run never finished. The runs all start together; at most this many phases
# run at once.
WORKER_THREADS_MAX = 24
PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
# The Coder's first turn: it creates app/x.py.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
PASS = {"pass": True, "findings": []}


class App:
    """The app's processes for one topology, against the fake LLM."""

    def __init__(self, db: str, llm_url: str, layer: str = "", worker_threads: int = 4, web_processes: int = 0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Fresh each time: a repository left by an earlier, interrupted run (same project
        # id, other commits) makes the Coder's git reset fail. Readable by all: the storage
        # account and the sandbox's accounts must reach them (mkdtemp makes them 0700).
        roots = {name: tempfile.mkdtemp(prefix="bench-events-") for name in ("REPOS_ROOT", "WORKTREES_ROOT")}
        for root in roots.values():
            os.chmod(root, 0o755)
        self.env = app_environment(llm_url) | roots
        if db == "sqlite":
            path = Path("/tmp/bench-events.sqlite3")
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            self.env |= {"DATABASE_URL": f"sqlite:///{path}", "REDIS_URL": "", "EMBEDDED_WORKER": ""}
        else:
            _recreate_postgres(PG_DATABASE)
            queue = f"bench-events-{uuid.uuid4().hex[:8]}"
            self.env |= {
                "DATABASE_URL": PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + PG_DATABASE,
                "REDIS_URL": REDIS_URL,
                "EMBEDDED_WORKER": "false",
                "CELERY_QUEUE": queue,
                "CHANNEL_LAYER": layer,
                # Redis pub/sub is shared by all of the server's databases: names of our own.
                "CHANNEL_LAYER_PREFIX": queue,
            }
        self.db = db
        self.worker_threads = worker_threads
        self.web_processes = web_processes
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.processes.append(daphne_started(self.port, self.env, self.web_processes))
        if self.db != "sqlite":
            worker = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--pool=threads",
                "-c",
                str(self.worker_threads),
                "-l",
                "WARNING",
            ]
            self.processes.append(subprocess.Popen(worker, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL))
        wait_healthy(self.url, 60)

    def web_cpu_seconds(self) -> float:
        """CPU time used so far by the web processes (daphne, or the launcher and its daphnes)."""
        return cpu_seconds(process_tree(self.processes[0].pid))

    def stop(self) -> None:
        processes_stopped(self.processes, 15)


async def watch(
    watched: list[tuple[str, int]], token: str, origin: str, start: object, stopped: set[str]
) -> list[float]:
    """Open ``count`` sockets on each ``ws_url``, call ``start`` (which starts the runs),
    and read every socket until its run completes: the agent-log latencies of all."""
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    ws_url_of: dict[int, str] = {}
    sockets = []
    for ws_url, count in watched:
        for _ in range(count):
            ws = await connect(
                ws_url, additional_headers={"Authorization": f"Token {token}"}, origin=origin, max_size=None
            )
            ws_url_of[id(ws)] = ws_url
            sockets.append(ws)

    async def read(ws: object) -> None:
        while True:
            message = json.loads(await ws.recv())  # type: ignore[attr-defined]
            received = time.time()
            if message["type"] == "agent-log":
                sent = datetime.fromisoformat(message["data"]["timestamp"]).timestamp()
                latencies.append(received - sent)
            if message["type"] == "pipeline-complete":
                return
            if message["type"] == "error" and message["data"].get("type") in STOPPED:
                # A run that stopped short (see the table's notes) sends nothing more.
                stopped.add(ws_url_of[id(ws)])
                return

    await asyncio.get_running_loop().run_in_executor(None, start)  # type: ignore[arg-type]
    await asyncio.wait_for(asyncio.gather(*(read(ws) for ws in sockets)), timeout=600)
    for ws in sockets:
        await ws.close()
    return latencies


def persisted_agent_logs(url: str, token: str) -> int:
    """How many agent-log events the worker published (each is persisted first)."""
    request = urllib.request.Request(url + "?follow=false", headers={"Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return sum(1 for line in response if line.strip() == b"event: agent-log")


def redis_round_trip(n: int = 2000) -> list[float]:
    """The floor: a message through Redis pub/sub to one subscriber."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe("bench-events-baseline")
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    samples: list[float] = []
    for _ in range(n):
        started = time.perf_counter()
        client.publish("bench-events-baseline", b"x" * 200)
        while pubsub.get_message(timeout=1) is None:
            pass
        samples.append(time.perf_counter() - started)
    pubsub.close()
    return samples


def load() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def measure_layer(args: object, layer: str, web_processes: int, llm: object, baseline_p50: float) -> list[list[object]]:
    """The rows of one app (one channel layer, one count of web processes): each viewer
    count on one run, then the concurrent runs."""
    from llm.demo.model import default_reply
    from tests.fake_anthropic import EDITOR, TextReply, ToolReply

    # The embedded topology carries the 4 runs its worker runs at once (README, "Capacity"):
    # its many-runs row is measured only when asked for.
    runs = int(args.runs if args.db != "sqlite" else args.embedded_runs)  # type: ignore[attr-defined]
    threads = min(max(4, runs), WORKER_THREADS_MAX)
    app = App(args.db, llm.url, layer=layer, worker_threads=threads, web_processes=web_processes)  # type: ignore[attr-defined]
    app.start()
    rows: list[list[object]] = []
    try:
        token = signed_up_token(app.url)

        def one_round(label: str, tasks: list[int], viewers: int) -> None:
            def start() -> None:
                for task_id in tasks:
                    http(app.url + f"/api/tasks/{task_id}/start-pipeline", {}, token)

            ws_base = app.url.replace("http", "ws")
            watched = [(f"{ws_base}/ws/tasks/{task_id}", viewers) for task_id in tasks]
            stopped: set[str] = set()
            web_cpu_before = app.web_cpu_seconds()
            latencies = asyncio.run(watch(watched, token, app.url, start, stopped))
            web_cpu = app.web_cpu_seconds() - web_cpu_before
            published = [persisted_agent_logs(app.url + f"/api/tasks/{task_id}/events", token) for task_id in tasks]
            expected = sum(published) * viewers
            rows.append(
                [
                    layer or "embedded",
                    web_processes or 1,
                    label,
                    sum(published),
                    len(latencies),
                    expected - len(latencies),
                    p50(latencies) * 1000,
                    pct(latencies, 99) * 1000,
                    f"{p50(latencies) * 1000 / baseline_p50:.0f}x",
                    web_cpu / max(1, len(latencies)) * 1e6,
                    load(),
                    len(stopped),
                ]
            )

        for clients in [int(c) for c in args.clients.split(",") if c]:  # type: ignore[attr-defined]
            task = http(app.url + "/api/tasks", {"title": f"Events to {clients}"}, token)
            # ~4 s of streamed tokens per agent: the worker flushes ~20 events a second.
            text = "token " * 700
            llm.script(  # type: ignore[attr-defined]
                ToolReply(input=PLAN, text=text, chunk_size=6, chunk_delay=0.006),
                ToolReply(name=EDITOR, input=CREATE_X, text=text, chunk_size=6, chunk_delay=0.006),
                TextReply("Created app/x.py."),
                ToolReply(input=PASS, text=text, chunk_size=6, chunk_delay=0.006),
            )
            one_round(f"1 run × {clients}", [task["id"]], clients)

        if runs:
            # Scripted replies would be shared out among the runs in arrival order: every
            # request gets the demo model's answer instead, streamed slowly (a chunk every
            # 0.1 s, ~3 s a reply) so that the runs overlap for their whole length.
            def streamed(request: object) -> object:
                return dataclasses.replace(default_reply(request), text="token " * 30, chunk_size=6, chunk_delay=0.1)  # type: ignore[arg-type]

            llm.fallback = streamed  # type: ignore[attr-defined]
            try:
                tasks = [http(app.url + "/api/tasks", {"title": f"Run {n}"}, token)["id"] for n in range(runs)]
                one_round(f"{runs} runs × {args.viewers_per_run}", tasks, int(args.viewers_per_run))  # type: ignore[attr-defined]
            finally:
                llm.fallback = default_reply  # type: ignore[attr-defined]
    finally:
        app.stop()
    return rows


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--clients", default="1,50,200", help="viewers of one run, one run per value")
    p.add_argument("--runs", default="50", help="concurrent runs of the last row (0: none)")
    p.add_argument("--embedded-runs", default="0", help="the same row in the embedded topology (--db sqlite)")
    p.add_argument("--viewers-per-run", default="2")
    p.add_argument("--layers", default="pubsub,per-socket", help="production topology only")
    p.add_argument(
        "--web-processes",
        default=f"1,{os.cpu_count() or 1}",
        help="production topology only: daphne processes sharing the port (deploy/web.py), one app per value",
    )
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.fake_anthropic import FakeAnthropicServer

    llm = FakeAnthropicServer(port=free_port()).start()
    baseline = redis_round_trip()
    baseline_p50 = p50(baseline) * 1000
    if args.db == "sqlite":
        apps = [("", 0)]
    else:
        counts = [int(count) for count in args.web_processes.split(",") if count]
        apps = [(layer, count) for layer in args.layers.split(",") for count in counts]
    before = load()
    rows: list[list[object]] = []
    try:
        for layer, web_processes in apps:
            rows += measure_layer(args, layer, web_processes, llm, baseline_p50)
    finally:
        llm.stop()
    topology = (
        "embedded (one daphne process: worker thread + in-memory channel layer), SQLite"
        if args.db == "sqlite"
        else "production (daphne + Celery worker process, Redis channel layer), PostgreSQL + Redis"
    )
    table(
        f"Live event latency — {topology}",
        [
            "channel layer",
            "web processes",
            "runs × viewers",
            "events published",
            "received (all viewers)",
            "lost",
            "p50 ms",
            "p99 ms",
            "p50 vs Redis pub/sub",
            "web CPU µs per delivery",
            "load after the row",
            "runs stopped short",
        ],
        rows,
        [
            f"Baseline, same run: 2,000 publishes of 200 bytes through Redis pub/sub to one subscriber: p50 "
            f"{baseline_p50:.3f} ms, p99 {pct(baseline, 99) * 1000:.3f} ms. Machine {before} before the first row.",
            "Channel layers: pubsub = config.pubsub_layer.CatchUpPubSubChannelLayer (one Redis publish per group "
            "and event, each daphne process fans out to its sockets); per-socket = channels_redis.core."
            "RedisChannelLayer (a Redis list per socket: one push per socket and event, one pop per socket), the "
            "baseline it replaced. Each layer and count of web processes gets its own daphne and worker, one after "
            "the other; web processes > 1: that many daphne processes accepting from one port (deploy/web.py), "
            "a run's sockets spread over them.",
            "Events: agent-log chunks. 1 run × M: one real pipeline run watched by M sockets (three agents "
            "streaming ~4 s each; the worker coalesces tokens into at most ~20 events a second per agent). "
            "N runs × 2: N runs started together, each watched by 2 sockets, the demo model's replies streamed "
            "a chunk every 0.1 s (worker: min(N, 24) threads: all runs are active at once, at most 24 "
            "phases execute at once).",
            "Latency: client receipt − the event's timestamp, taken when the worker publishes it (this includes "
            "the event's database write and commit).",
            "Published: the runs' agent-log events as persisted (the SSE endpoint with follow=false); lost: "
            "published × viewers − received. Both layers drop what arrives for a socket with "
            "CHANNEL_LAYER_CAPACITY (2,000) messages waiting; beyond what the machine can send, events queue "
            "and latency grows instead. The clients run in this process, on the same two cores as the app.",
            "Runs stopped short: runs that paused or failed before completing (their events up to then still count).",
            "Web CPU per delivery: the CPU time (user + system) the web processes used during the row (HTTP "
            "requests, socket handshakes and the runs' starts included), divided by the events received: what one "
            "event to one socket costs the server, the figure that sets how many viewers a core serves, and one "
            "that the machine's load moves far less than the latencies.",
        ],
    )


if __name__ == "__main__":
    threading.current_thread().name = "bench-events"
    main()
