"""Many runs per worker: N runs at once in the production topology (daphne + one
separate ``celery worker`` process on the thread pool, PostgreSQL, Redis), each watched
by a websocket client, against the fake Anthropic server streaming at a model's pace.

Each run's Planner streams ``--seconds`` (10 by default; the issue's calls last ~30 s)
of tokens at ``--rate`` tokens a second (50), every token stamped with the time the fake
server wrote it; then its Coder and Reviewer answer at once (the demo model). A token's
latency is the client's clock when the page's websocket receives it − the stamp: the
SDK's stream, the worker's coalescing (one agent-log event per agent every 50 ms at
most), the event's database write, Redis, daphne, the socket. Same machine, same clock.

Per N: token-to-screen p50/p99, tokens lost, time from the start request to the run's
first token on screen (the wait for a worker), the worker's peak RSS and CPU, daphne's
CPU, the bench database's peak connections. The answer: the largest N whose p99 ≤ 100 ms.

Baseline, in the same run: the old worker (``--pool=prefork --concurrency=2``) with the
first N. Its tokens are as quick (two runs stream at a time), but the other runs wait
queued for a process: what a user saw was the time to the first token, so that is the
figure to compare; the threads' latency is compared with the same-run floor instead (one
run alone, N = 1).

The fake server runs in a process of its own (``--serve-llm``), so that its hundreds of
streams do not share this process's interpreter with the clients that time them.

Run: .venv/bin/python bench/bench_concurrency.py --db postgres [--levels 10,25,50,75,100]
     [--seconds 10] [--rate 50] [--baseline-runs 10]
(``--db sqlite`` is accepted for bench/run_all.py and says the benchmark needs PostgreSQL.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from _app import (
    app_environment,
    daphne_started,
    free_port,
    http,
    paced_model_arguments,
    paced_model_started,
    process_tree,
    processes_stopped,
    signed_up_token,
    wait_healthy,
)
from _app import cpu_seconds as tree_cpu_seconds
from _common import PG_ADMIN_URL, PG_SERVER, ROOT, _recreate_postgres, p50, parser, pct, table

REDIS_URL = "redis://127.0.0.1:6379/11"
# A database of its own, not _common's "bench": bench_events.py may be recreating that one
# at the same moment (the benchmarks of different branches run side by side here).
DATABASE = "bench_concurrency"
DATABASE_URL = f"{PG_SERVER}/{DATABASE}"
PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
STAMP = re.compile(r"\[t=(\d+\.\d+)\]")
P99_GOAL_MS = 100.0
# Connections left for everybody else on the shared server (other engineers, daphne).
CONNECTIONS_HEADROOM = 15
# Every run starts at once (its worktree, its recall, the model's first call): tokens
# written later than this into their stream show the steady state apart from that burst.
STEADY_AFTER = 2.0


# --- The fake model, in a process of its own --------------------------------------------


def serve_llm(port: int, seconds: float, rate: float) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.fake_anthropic import FakeAnthropicServer, Paced, ToolReply, default_reply

    def reply(request):  # type: ignore[no-untyped-def]
        if request.answer_tool == "submit_plan":
            return Paced(ToolReply(input=PLAN), tokens=int(seconds * rate), tokens_per_second=rate, stamped=True)
        return default_reply(request, delay=0.0)

    # Every call opens a connection (a new SDK client each): a hundred at once must not
    # overflow the listen backlog (5 by default) and wait for SYN retries.
    FakeAnthropicServer.request_queue_size = 1024
    server = FakeAnthropicServer(port=port)
    server.fallback = reply
    print("ready", flush=True)
    server.serve_forever()


# --- The app's processes -----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and every live process below it."""
    return tree_cpu_seconds(process_tree(pid))


def machine_busy_seconds() -> float:
    """CPU time every core of the box spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """This process's user + system CPU: the websocket clients and the samplers."""
    times = os.times()
    return times.user + times.system


def rss_mb(pid: int) -> float:
    total = 0
    for each in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def bench_connections() -> tuple[int, int]:
    """(connections to the bench database, free connections on the server)."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        limit = int(conn.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]
        used = int(conn.execute("SELECT count(*) FROM pg_stat_activity").fetchone()[0])  # type: ignore[index]
        mine = int(
            conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [DATABASE]).fetchone()[0]  # type: ignore[index]
        )
    return mine, limit - used


class App:
    """daphne and one Celery worker process against a fresh bench database."""

    def __init__(self, llm_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.queue = f"bench-concurrency-{uuid.uuid4().hex[:8]}"
        # No test command: the runs never start the sandbox.
        self.env = app_environment(llm_url) | {
            "DATABASE_URL": DATABASE_URL,
            "REDIS_URL": REDIS_URL,
            "EMBEDDED_WORKER": "false",
            "CELERY_QUEUE": self.queue,
        }
        self.daphne: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_web(self) -> None:
        _recreate_postgres(DATABASE)
        # This benchmark's own Redis database: the last run's jobs, heartbeats and
        # sign-up rate-limit counters (the cache) go.
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
        self.daphne = daphne_started(self.port, self.env)

    def start_worker(self, pool: list[str], processes: int = 1) -> None:
        """The Procfile's worker command, with ``pool`` (e.g. ``--pool=threads``), in
        ``processes`` processes side by side (as ``--scale worker=N``)."""
        for _ in range(processes):
            command = [sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "WARNING", *pool]
            command += ["-n", f"{self.queue}-{time.monotonic_ns()}@%h"]
            self.workers.append(subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL))
        wait_healthy(self.url, 90)

    @property
    def worker_pids(self) -> list[int]:
        return [worker.pid for worker in self.workers]

    def stop_worker(self) -> None:
        processes_stopped(self.workers, 60)
        self.workers = []
        # Its heartbeat goes with it: the next worker's /healthz must be its own.
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=f"autocoder:worker-heartbeat:{self.queue}:*"):
            client.delete(key)

    def stop(self) -> None:
        self.stop_worker()
        if self.daphne is not None:
            processes_stopped([self.daphne], 15)


# --- One level ---------------------------------------------------------------------------


@dataclass
class Level:
    runs: int
    latencies: list[float] = field(default_factory=list)
    #: Each token's time in the worker (stamp → the event's timestamp, taken as the worker
    #: publishes it) and after it (→ the page: the event's commit, Redis, daphne).
    in_worker: list[float] = field(default_factory=list)
    delivery: list[float] = field(default_factory=list)
    #: The latencies of tokens written after their stream's first STEADY_AFTER seconds.
    steady: list[float] = field(default_factory=list)
    first_token: list[float] = field(default_factory=list)
    tokens_expected: int = 0
    finished: int = 0
    worker_rss_mb: float = 0.0
    worker_cpu: float = 0.0
    daphne_cpu: float = 0.0
    #: The whole box (% of one core), and what of it the load itself took: the fake API
    #: (its own process) and this process's clients, which in production live elsewhere.
    machine_cpu: float = 0.0
    load_cpu: float = 0.0
    connections: int = 0
    makespan: float = 0.0


class Sampler(threading.Thread):
    """Peak RSS of the worker and peak connections to the bench database, every 0.5 s."""

    def __init__(self, worker_pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.worker_pids = worker_pids
        self.rss = 0.0
        self.connections = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.rss = max(self.rss, sum(rss_mb(pid) for pid in self.worker_pids))
            with contextlib.suppress(Exception):  # a sample missed
                self.connections = max(self.connections, bench_connections()[0])


async def run_level(app: App, token: str, runs: int, seconds: float, rate: float, llm_pid: int) -> Level:
    from websockets.asyncio.client import connect

    level = Level(runs=runs, tokens_expected=runs * int(seconds * rate))
    tasks = [http(app.url + "/api/tasks", {"title": f"Run {n} of {runs}"}, token) for n in range(runs)]
    sockets = []
    for task in tasks:
        sockets.append(
            await connect(
                app.url.replace("http", "ws") + f"/ws/tasks/{task['id']}",
                additional_headers={"Authorization": f"Token {token}"},
                origin=app.url,  # type: ignore[arg-type]
                max_size=None,
                open_timeout=30,
            )
        )
    assert app.workers and app.daphne is not None
    sampler = Sampler(app.worker_pids)
    sampler.start()
    worker_cpu = sum(cpu_seconds(pid) for pid in app.worker_pids)
    daphne_cpu = cpu_seconds(app.daphne.pid)
    machine_cpu = machine_busy_seconds()
    load_cpu = cpu_seconds(llm_pid) + own_cpu_seconds()
    started_at: dict[int, float] = {}
    stream_starts: dict[int, float] = {}

    async def watch(ws: object, index: int) -> None:
        first = True
        while True:
            message = json.loads(await ws.recv())  # type: ignore[attr-defined]
            received = time.time()
            if message["type"] == "agent-log" and message["data"].get("agent") == "planner":
                stamps = STAMP.findall(message["data"]["chunk"])
                if stamps and first:
                    level.first_token.append(received - started_at[index])
                    first = False
                published = datetime.fromisoformat(message["data"]["timestamp"]).timestamp()
                for stamp in map(float, stamps):
                    level.latencies.append(received - stamp)
                    level.in_worker.append(published - stamp)
                    level.delivery.append(received - published)
                    stream_began = stream_starts.setdefault(index, stamp)
                    if stamp - stream_began >= STEADY_AFTER:
                        level.steady.append(received - stamp)
            elif message["type"] == "pipeline-complete":
                level.finished += 1
                return

    began = time.monotonic()
    watchers = [asyncio.create_task(watch(ws, n)) for n, ws in enumerate(sockets)]
    loop = asyncio.get_running_loop()
    for n, task in enumerate(tasks):
        started_at[n] = time.time()
        await loop.run_in_executor(
            None, lambda t=task: http(app.url + f"/api/tasks/{t['id']}/start-pipeline", {}, token)
        )
    budget = 120 + seconds * runs  # a prefork worker runs them two at a time
    try:
        await asyncio.wait_for(asyncio.gather(*watchers), timeout=budget)
    except TimeoutError:
        print(f"  N={runs}: {level.finished} of {runs} runs finished within {budget:.0f} s", flush=True)
    elapsed = time.monotonic() - began
    level.makespan = elapsed
    level.worker_cpu = (sum(cpu_seconds(pid) for pid in app.worker_pids) - worker_cpu) / elapsed * 100
    level.daphne_cpu = (cpu_seconds(app.daphne.pid) - daphne_cpu) / elapsed * 100
    level.machine_cpu = (machine_busy_seconds() - machine_cpu) / elapsed * 100
    level.load_cpu = (cpu_seconds(llm_pid) + own_cpu_seconds() - load_cpu) / elapsed * 100
    sampler.stopped.set()
    sampler.join(2)
    level.worker_rss_mb, level.connections = sampler.rss, sampler.connections
    for ws in sockets:
        await ws.close()
    return level


def row(label: str, level: Level, floor: Level | None) -> list[object]:
    ms = [latency * 1000 for latency in level.latencies]
    p99 = pct(ms, 99) if ms else float("nan")
    return [
        label,
        level.runs,
        f"{level.finished}/{level.runs}",
        p50(ms) if ms else float("nan"),
        p99,
        f"{p99 / (pct(floor.latencies, 99) * 1000):.1f}x" if floor and floor.latencies and ms else "—",
        pct([latency * 1000 for latency in level.steady], 99) if level.steady else float("nan"),
        pct([latency * 1000 for latency in level.in_worker], 99) if level.in_worker else float("nan"),
        pct([latency * 1000 for latency in level.delivery], 99) if level.delivery else float("nan"),
        level.tokens_expected - len(ms),
        p50(level.first_token) if level.first_token else float("nan"),
        pct(level.first_token, 99) if level.first_token else float("nan"),
        level.makespan,
        level.worker_rss_mb,
        level.worker_cpu,
        level.daphne_cpu,
        level.load_cpu,
        level.machine_cpu,
        level.connections,
    ]


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--levels", default="10,15,20,25,50,75,100")
    paced_model_arguments(p, seconds=10.0)
    p.add_argument("--baseline-runs", type=int, default=10)
    p.add_argument("--processes", type=int, default=1, help="worker processes side by side, N/processes threads each")
    args = p.parse_args()
    if args.serve_llm:
        serve_llm(args.serve_llm, args.seconds, args.rate)
        return
    if args.db != "postgres":
        print("### Many runs per worker — needs the production topology\n")
        print("Measured with `--db postgres` only (PostgreSQL + Redis + a separate worker process).\n")
        return
    sys.path.insert(0, str(ROOT))
    llm, llm_port = paced_model_started(__file__, args.seconds, args.rate)
    app = App(f"http://127.0.0.1:{llm_port}")
    rows: list[list[object]] = []
    skipped: list[str] = []
    sustained = 0
    try:
        app.start_web()
        token = signed_up_token(app.url, wait=60)

        levels = [int(n) for n in args.levels.split(",")]
        # The baseline first: the old worker, two processes, the first level's runs.
        app.start_worker(["--pool=prefork", "--concurrency=2"])
        baseline = asyncio.run(run_level(app, token, args.baseline_runs, args.seconds, args.rate, llm.pid))
        app.stop_worker()
        # The floor: one run alone on the thread pool.
        app.env["WORKER_THREADS"] = "1"
        app.start_worker(["--pool=threads"])
        floor = asyncio.run(run_level(app, token, 1, args.seconds, args.rate, llm.pid))
        app.stop_worker()
        rows.append(row("prefork -c 2 (before)", baseline, floor))
        rows.append(row("threads, one run (floor)", floor, floor))
        for runs in levels:
            _, free = bench_connections()
            if runs + CONNECTIONS_HEADROOM > free:
                skipped.append(f"N={runs}: not run, PostgreSQL has {free} connections free (a phase holds one)")
                break
            app.env["WORKER_THREADS"] = str(-(-runs // args.processes))
            app.start_worker(["--pool=threads"], processes=args.processes)
            level = asyncio.run(run_level(app, token, runs, args.seconds, args.rate, llm.pid))
            app.stop_worker()
            label = f"threads ({runs})" if args.processes == 1 else f"{args.processes} × threads ({runs})"
            rows.append(row(label, level, floor))
            ms = [latency * 1000 for latency in level.latencies]
            finished = level.finished == runs and bool(ms)
            if finished and pct(ms, 99) <= P99_GOAL_MS:
                sustained = runs
            if not finished or pct(ms, 99) > 10 * P99_GOAL_MS:
                skipped.append(f"Levels above N={runs} not run: it degraded past {10 * P99_GOAL_MS:g} ms or lost runs")
                break
    finally:
        app.stop()
        llm.terminate()
        llm.wait(10)
    notes = [
        f"Each run's Planner streams {args.seconds:g} s at {args.rate:g} tokens/s (the issue's calls: ~30 s), every "
        "token stamped by the fake server (its own process) when written; latency = the page's websocket receiving "
        "it − the stamp. Coder and Reviewer then answer at once. One websocket client per run, in this process.",
        f"Worker: `celery -A config worker --pool=threads`, {args.processes} process(es) with WORKER_THREADS = "
        "N / processes, or the old `--pool=prefork --concurrency=2`; daphne ×1; PostgreSQL; Redis (broker, "
        "channel layer) db 11.",
        "First token: the start request → the run's first token on the page (waiting for a worker included). "
        "Makespan: first start → last run complete. CPU: % of one core over the makespan (the worker with its "
        "children). RSS: the worker's peak (all its processes). Connections: peak to the bench database (all "
        "processes). Fake API + clients: the load itself — the fake server's process and this one's websocket "
        "clients, which in production are Anthropic's and the viewers' machines; box: every process on the "
        "machine (/proc/stat), PostgreSQL and Redis included.",
        "Baseline: the prefork worker at the same load runs two at a time: its tokens are as quick, but the others "
        "wait for a process (first token p99). The thread levels' p99 is compared with one run alone (floor), "
        "which includes the worker's coalescing of tokens into one event per 50 ms.",
        f"Largest N sustained with p99 ≤ {P99_GOAL_MS:g} ms and every run finished: {sustained or 'none'}.",
        *skipped,
    ]
    table(
        "Many runs per worker — production topology, PostgreSQL + Redis",
        [
            "worker",
            "runs",
            "finished",
            "token p50 ms",
            "token p99 ms",
            "p99 vs floor",
            f"p99 after {STEADY_AFTER:g} s ms",
            "in worker p99 ms",
            "delivery p99 ms",
            "tokens lost",
            "first token p50 s",
            "first token p99 s",
            "makespan s",
            "worker RSS MB",
            "worker CPU %",
            "daphne CPU %",
            "fake API + clients CPU %",
            f"box CPU % (of {os.cpu_count() or 1}00)",
            "DB connections",
        ],
        rows,
        notes,
    )


if __name__ == "__main__":
    main()
