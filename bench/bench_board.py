"""Board and task API over a project with 10,000 tasks, against a plain JsonResponse.

Run: .venv/bin/python bench/bench_board.py [--db sqlite|postgres] [--tasks 10000] [--n 30]
"""

from __future__ import annotations

import json
import time

from _common import p50, parser, setup_django, table

FIELDS = ("id", "title", "description", "category", "priority", "status", "position", "created_at", "updated_at")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--tasks", type=int, default=10_000)
    p.add_argument("--n", type=int, default=30, help="requests per scenario")
    args = p.parse_args()
    label = setup_django("board", args.db)

    from django.core.serializers.json import DjangoJSONEncoder
    from django.db import connection
    from django.http import JsonResponse
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from accounts.models import User
    from projects.models import Project
    from tasks.models import Task, TaskStatus
    from tasks.selectors import BOARD_COLUMN_CAP

    user = User.objects.create_user(email="bench@example.com", password="bench-password-123")
    project = Project.objects.create(owner=user, name="Bench")
    statuses = list(TaskStatus.values)
    t0 = time.perf_counter()
    Task.objects.bulk_create(
        [
            Task(
                project=project,
                title=f"Task {i}: make the thing number {i} work",
                description="Make the thing work. " * 5,
                status=statuses[i % len(statuses)],
                position=i // len(statuses),
            )
            for i in range(args.tasks)
        ],
        batch_size=1000,
    )
    seed_s = time.perf_counter() - t0

    client = Client(HTTP_HOST="localhost")
    client.force_login(user)

    def baseline(limit: int) -> object:
        rows = list(Task.objects.filter(project=project).order_by("status", "position", "id").values(*FIELDS)[:limit])
        return JsonResponse({"count": args.tasks, "results": rows}, encoder=DjangoJSONEncoder).content

    def measure(fn, n: int) -> tuple[float, float, int, int]:  # type: ignore[no-untyped-def]
        fn()  # warm-up
        with CaptureQueriesContext(connection) as ctx:
            body = fn()
        queries = len(ctx.captured_queries)
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        size = len(body) if isinstance(body, bytes) else 0
        return p50(samples) * 1000, len(samples) / sum(samples), queries, size

    def get(url: str, **headers: str):  # type: ignore[no-untyped-def]
        def call() -> bytes:
            r = client.get(url, headers=headers)
            if r.status_code != 200:
                raise RuntimeError(f"{url}: HTTP {r.status_code}")
            return r.content

        return call

    scenarios = [
        ("baseline: values()[:50] + JsonResponse", lambda: baseline(50), args.n),
        ("baseline: values()[:200] + JsonResponse", lambda: baseline(200), args.n),
        ("GET /api/tasks?project=<id> (page_size=50)", get(f"/api/tasks?project={project.pk}&page_size=50"), args.n),
        ("GET /api/tasks?project=<id> (page_size=200)", get(f"/api/tasks?project={project.pk}&page_size=200"), args.n),
        (
            "baseline: values() all rows + json.dumps",
            lambda: json.dumps(
                list(Task.objects.filter(project=project).values(*FIELDS)), cls=DjangoJSONEncoder
            ).encode(),
            max(3, args.n // 5),
        ),
        (
            f"GET /?project=<id> (board page, {args.tasks} tasks)",
            get(f"/?project={project.pk}"),
            max(3, args.n // 10),
        ),
        ("GET / (htmx partial, HX-Request)", get("/", HX_Request="true"), max(3, args.n // 10)),
    ]
    rows = []
    base = {}
    for name, fn, n in scenarios:
        ms, rps, queries, size = measure(fn, n)
        key = "200" if "200" in name else ("all" if ("all" in name or "/ " in name or "/?" in name) else "50")
        if name.startswith("baseline"):
            base[key] = ms
            ratio = "1.0x"
        else:
            ratio = f"{ms / base[key]:.1f}x" if key in base else ""
        rows.append((name, n, ms, rps, queries, f"{size / 1024:.0f} KiB", ratio))
    table(
        f"Board and API, {args.tasks:,} tasks ({label})",
        ["scenario", "requests", "p50 ms", "req/s", "queries", "body", "vs baseline"],
        rows,
        [
            f"Seeded {args.tasks:,} tasks with bulk_create in {seed_s:.1f} s; django.test.Client with force_login.",
            "Baselines build the same rows with .values() in the same process, no DRF, no templates, no middleware.",
            f"The board page renders at most {BOARD_COLUMN_CAP} cards per column, with each column's exact count and"
            " a Show more link; its baseline is still all rows as JSON.",
        ],
    )


if __name__ == "__main__":
    main()
