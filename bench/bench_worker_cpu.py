"""A worker process's CPU per streaming run: the hot path of bench_concurrency.py alone.

N threads of this process each stream one reply at a model's pace (``--rate`` tokens a
second for ``--seconds``) from the fake Anthropic server (a process of its own) through
the real provider (``llm/providers/anthropic.py``: the SDK's stream, its helper thread)
into an ``AgentLogStream`` (pipelines/agent_log.py): coalesced into agent-log events,
stored in PostgreSQL and published to Redis (the production channel layer), as a
worker's phase does. Measured: this process's CPU time over the streaming (user +
system, all its threads), the events stored, and each token's time in the process (the
server's stamp → the timestamp of the event that carries it, taken as it is published).

CPU per streaming run (% of one core) is what decides how many runs a worker process
carries: its Python runs on one core, so past ~100% the tokens queue for it. It is
measured apart from the machine's load (which bench_concurrency.py's latencies are not):
the figure to divide a box's cores by.

Before, in the same run: ``PIPELINE_LOG_FLUSHER`` off, each stream writing its own events
on its own thread (the write-driven flush every PIPELINE_LOG_FLUSH_SECONDS the worker had).

Run: .venv/bin/python bench/bench_worker_cpu.py --db postgres [--levels 10,25] [--seconds 8]
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from datetime import datetime

from _app import paced_model_arguments, paced_model_started
from _common import PG_SERVER, ROOT, _recreate_postgres, p50, parser, pct, table

DATABASE = "bench_worker_cpu"
REDIS_URL = "redis://127.0.0.1:6379/11"
STAMP = re.compile(r"\[t=(\d+\.\d+)\]")


def serve_llm(port: int, seconds: float, rate: float) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.fake_anthropic import FakeAnthropicServer, Paced, TextReply

    FakeAnthropicServer.request_queue_size = 1024
    server = FakeAnthropicServer(port=port)
    server.fallback = lambda request: Paced(
        TextReply(text=""), tokens=int(seconds * rate), tokens_per_second=rate, stamped=True
    )
    print("ready", flush=True)
    server.serve_forever()


def setup(llm_url: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    _recreate_postgres(DATABASE)
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "DEBUG": "true",
            "DATABASE_URL": f"{PG_SERVER}/{DATABASE}",
            "REDIS_URL": REDIS_URL,
            "EMBEDDED_WORKER": "false",
            "ANTHROPIC_BASE_URL": llm_url,
        }
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def run_level(runs: int, flusher: bool, llm_url: str) -> dict[str, float]:
    from django.conf import settings
    from django.db import connection

    from llm.providers.anthropic import AnthropicProvider
    from llm.providers.base import LLMRequest
    from pipelines.agent_log import AgentLogStream
    from pipelines.models import PipelineRun, RunEvent
    from tests.factories import TaskFactory

    settings.PIPELINE_LOG_FLUSHER = flusher
    pipeline_runs = [PipelineRun.objects.create(task=TaskFactory(), number=1) for _ in range(runs)]
    provider = AnthropicProvider(api_key="sk-ant-bench", base_url=llm_url)
    request = LLMRequest(
        system="You plan.", messages=[{"role": "user", "content": "Plan it."}], model="m", max_tokens=4096
    )
    start = threading.Barrier(runs + 1)
    errors: list[BaseException] = []

    def stream(run: object) -> None:
        log = AgentLogStream(task=run.task, run=run, agent="planner")  # type: ignore[attr-defined]
        provider._client()  # the thread's SDK client, built before the clock starts (a worker keeps it)
        start.wait()
        try:
            provider.complete(request, on_chunk=log.write, should_cancel=lambda: False)
            log.flush()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=stream, args=(run,)) for run in pipeline_runs]
    for thread in threads:
        thread.start()
    start.wait()
    cpu, began = time.process_time(), time.monotonic()
    for thread in threads:
        thread.join()
    cpu, wall = time.process_time() - cpu, time.monotonic() - began
    if errors:
        raise errors[0]
    latencies, tokens, events = [], 0, 0
    for data in RunEvent.objects.filter(run__in=pipeline_runs, type="agent-log").values_list("data", flat=True):
        events += 1
        published = datetime.fromisoformat(data["timestamp"]).timestamp()
        for stamp in map(float, STAMP.findall(data["chunk"])):
            tokens += 1
            latencies.append((published - stamp) * 1000)
    return {
        "cpu_per_run": cpu / wall / runs * 100,
        "cpu": cpu / wall * 100,
        "cpu_per_event_ms": cpu / events * 1000 if events else float("nan"),
        "events_per_run_s": events / runs / wall,
        "tokens": tokens,
        "p50": p50(latencies),
        "p99": pct(latencies, 99),
        "wall": wall,
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--levels", default="10,25")
    paced_model_arguments(p, seconds=8.0)
    args = p.parse_args()
    if args.serve_llm:
        serve_llm(args.serve_llm, args.seconds, args.rate)
        return
    if args.db != "postgres":
        print("### A worker's CPU per streaming run — needs PostgreSQL and Redis (`--db postgres`)\n")
        return
    llm, port = paced_model_started(__file__, args.seconds, args.rate)
    llm_url = f"http://127.0.0.1:{port}"
    rows: list[list[object]] = []
    try:
        setup(llm_url)
        load = os.getloadavg()[0]
        for runs in [int(n) for n in args.levels.split(",")]:
            for label, flusher in (("each stream writes its own (before)", False), ("one flusher per process", True)):
                level = run_level(runs, flusher, llm_url)
                expected = runs * int(args.seconds * args.rate)
                rows.append(
                    [
                        label,
                        runs,
                        level["cpu_per_run"],
                        100 / level["cpu_per_run"],
                        level["cpu"],
                        level["events_per_run_s"],
                        level["cpu_per_event_ms"],
                        level["p50"],
                        level["p99"],
                        expected - level["tokens"],
                    ]
                )
    finally:
        llm.terminate()
        llm.wait(10)
    table(
        "A worker's CPU per streaming run — PostgreSQL + Redis",
        [
            "agent log written by",
            "runs",
            "CPU per run % of a core",
            "runs per core",
            "process CPU %",
            "events per run per s",
            "CPU per event ms",
            "in process p50 ms",
            "in process p99 ms",
            "tokens lost",
        ],
        rows,
        [
            f"Each run streams {args.seconds:g} s at {args.rate:g} tokens/s from the fake server (its own process) "
            "through the Anthropic provider into an AgentLogStream, PIPELINE_LOG_FLUSH_SECONDS "
            "(50 ms) coalescing; events stored in PostgreSQL, published on the pub/sub layer (Redis db 11).",
            "CPU: this process's user + system time over the streaming ÷ its wall time. Runs per core = 100 ÷ "
            "CPU per run: the streaming runs one worker process carries before its core is full (leave headroom: "
            "the rest of a phase — recall, tools, git — costs CPU too).",
            "In process: a token's stamp (written by the server) → the timestamp of the event carrying it "
            f"(taken as it is published). Load average (1 min) at the start: {load:.1f} on "
            f"{os.cpu_count()} cores: latencies follow it, CPU time much less.",
        ],
    )


if __name__ == "__main__":
    main()
