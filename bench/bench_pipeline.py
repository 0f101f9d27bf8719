"""Pipeline overhead: N runs (plan → code → review) through the real embedded Celery
worker against the fake Anthropic server, against the same four LLM calls (the Planner,
the Coder's two turns: one edit, then done, the Reviewer) made back to back with
``AnthropicProvider.complete`` alone. A run also makes its worktree and commits.

Run: .venv/bin/python bench/bench_pipeline.py [--db sqlite|postgres] [--n 20]
"""

from __future__ import annotations

import os
import time

from _common import p50, parser, pct, setup_django, table

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
PASS = {"pass": True, "findings": []}


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20, help="pipeline runs")
    args = p.parse_args()
    # The embedded worker needs the in-process memory broker: no Redis for this one.
    os.environ.pop("REDIS_URL", None)
    label = setup_django("pipeline", args.db)

    from django.conf import settings

    from accounts.models import User
    from llm.providers.anthropic import AnthropicProvider
    from llm.providers.base import LLMRequest
    from pipelines.agents import prompts as agents
    from pipelines.models import AgentCall, PipelineRun, RunStatus
    from pipelines.runs.services import run_start
    from projects.models import Project
    from tasks.models import Task
    from tests.fake_anthropic import FakeAnthropicServer, ToolReply, coder_creates
    from tests.workers import embedded_worker

    server = FakeAnthropicServer().start()
    settings.ANTHROPIC_BASE_URL = server.url
    settings.ANTHROPIC_API_KEY = "sk-ant-bench-key"
    settings.LLM_PROVIDER = "anthropic"
    settings.LLM_TIMEOUT_SECONDS = 10

    # The Coder's editing conversation: it creates app/x.py, then says it is done.
    coder = coder_creates("app/x.py", "x = 1\n")

    def script() -> None:
        server.script(ToolReply(input=PLAN), *coder, ToolReply(input=PASS))

    user = User.objects.create_user(email="bench@example.com", password="bench-password-123")
    project = Project.objects.create(owner=user, name="Bench")

    # Baseline: the three calls alone, with the prompts of a real run's calls.
    provider = AnthropicProvider(api_key="sk-ant-bench-key", base_url=server.url, timeout=10)
    tools = [agents.PLAN_TOOL, None, None, agents.REVIEW_TOOL]
    prompts = [
        agents.planner_prompt(title="Add x", description="x should exist"),
        "Write the changes for the plan: " + str(PLAN),
        "The file is created; go on.",
        "Review these changes: +x = 1",
    ]

    def direct() -> float:
        script()
        t = time.perf_counter()
        for tool, prompt in zip(tools, prompts, strict=True):
            provider.complete(
                LLMRequest(
                    system="You are an agent.",
                    messages=[{"role": "user", "content": prompt}],
                    model="claude-sonnet-4-5",
                    max_tokens=4096,
                    tool=tool,
                ),
                on_chunk=lambda _chunk: None,
                should_cancel=lambda: False,
            )
        return time.perf_counter() - t

    direct()  # warm-up
    base = [direct() for _ in range(args.n)]

    def one_run(i: int) -> tuple[float, str]:
        task = Task.objects.create(project=project, title=f"Add x {i}", description="x should exist")
        script()
        t = time.perf_counter()
        run = run_start(task=task, user=user)
        deadline = t + 60
        status = ""
        while time.perf_counter() < deadline:
            status = PipelineRun.objects.values_list("status", flat=True).get(pk=run.pk)
            if status in (RunStatus.AWAITING_APPROVAL, RunStatus.FAILED, RunStatus.CANCELLED):
                break
            time.sleep(0.005)
        return time.perf_counter() - t, status

    runs: list[float] = []
    statuses: list[str] = []
    with embedded_worker(concurrency=2, beat=False):
        one_run(-1)  # warm-up
        for i in range(args.n):
            elapsed, status = one_run(i)
            runs.append(elapsed)
            statuses.append(status)
    server.stop()

    ok = sum(s == RunStatus.AWAITING_APPROVAL for s in statuses)
    calls = AgentCall.objects.count()
    b50, r50 = p50(base), p50(runs)
    rows = [
        ("baseline: 4 × AnthropicProvider.complete back to back", args.n, b50 * 1000, pct(base, 99) * 1000, "1.0x"),
        (
            "pipeline run via embedded worker (start → awaiting approval)",
            args.n,
            r50 * 1000,
            pct(runs, 99) * 1000,
            f"{r50 / b50:.1f}x",
        ),
    ]
    table(
        f"Pipeline overhead, {args.n} runs ({label})",
        ["path", "runs", "p50 ms", "p99 ms", "vs baseline"],
        rows,
        [
            f"Orchestration overhead per run (p50 run − p50 baseline): {(r50 - b50) * 1000:,.0f} ms; "
            f"ratio {r50 / b50:.1f}x.",
            f"{ok}/{args.n} runs reached awaiting_approval; {calls} agent calls recorded.",
            "Fake Anthropic server over HTTP on localhost, ToolReply with chunk_delay=0; the run is polled "
            "every 5 ms, so timings carry up to ~5 ms of polling slack.",
        ],
    )


if __name__ == "__main__":
    main()
