"""The production topology end to end, as `make up-prod` starts it.

supervisord runs the Procfile (daphne, a Celery worker, celery beat; deploy/supervise.py)
against the test's PostgreSQL database and Redis; the LLM is the fake Anthropic server of
this process.
Everything after start-up goes through real clients only: HTTP for the API and a
websocket client for the live events, as a script on another machine would.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from pipelines.models import AgentCall, RunEvent
from tests.fake_anthropic import EDITOR, FakeAnthropicServer, TextReply, ToolReply, coder_creates
from tests.processes import (
    ApiClient,
    ProductionStack,
    command_line,
    free_port,
    is_same_process,
    open_task_socket,
    receive_until,
    stack_env,
    tcp_peer_owners,
    wait_for,
)
from tests.workers import delete_queue

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(settings.REDIS_URL is None, reason="REDIS_URL is unset"),
]

PLAN = {"subtasks": [{"id": "s1", "title": "Add x", "description": "Create app/x.py", "order": 1}]}
# The Coder's editing conversation: it creates app/x.py, then says it is done.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}
# daphne processes sharing the port (deploy/web.py), as on a two-core machine by default.
WEB_PROCESSES = 2


@pytest.fixture
def stack(fake_llm: FakeAnthropicServer, tmp_path: Path) -> Iterator[ProductionStack]:
    # A queue of this test's own: another worker on the shared Redis must not take its jobs.
    queue = f"autocoder-topology-{uuid.uuid4().hex[:10]}"
    port = free_port()
    assert settings.REDIS_URL is not None
    # Two web processes and two worker processes (WEB_PROCESSES, WORKER_PROCESSES): they
    # share the port, the queue and the run.
    env = stack_env(
        port=port,
        redis_url=settings.REDIS_URL,
        queue=queue,
        llm_url=fake_llm.url,
        workdir=tmp_path,
        WEB_PROCESSES=str(WEB_PROCESSES),
        WORKER_PROCESSES="2",
    )
    stack = ProductionStack(port=port, log=tmp_path / "stack.log", env=env)
    stack.start()
    try:
        yield stack
    finally:
        stack.kill()
        delete_queue(queue)


def test_make_up_prod_topology_runs_a_pipeline_over_http_and_websocket(
    stack: ProductionStack, fake_llm: FakeAnthropicServer
) -> None:
    health = stack.wait_healthy()
    assert health["status"] == "ok", health
    assert health["broker"]["transport"] == "redis"
    # Healthy with the first worker's heartbeat; the second's follows.
    wait_for(lambda: stack.health()[1]["worker"].get("count") == 2, 60, lambda: str(stack.health()))
    health = stack.health()[1]
    assert health["worker"] == {**health["worker"], "ok": True, "mode": "heartbeat", "count": 2}
    # Three programs under supervisord: daphne, the workers' launcher and beat; the
    # launcher's two `celery worker` processes each have a node name of their own.
    programs = " | ".join(command_line(pid) for pid in stack.children)
    for program in ("daphne", "deploy/workers.py", "celery -A config beat"):
        assert program in programs, programs
    workers = [command_line(pid) for pid in stack.children if "celery -A config worker" in command_line(pid)]
    names = sorted(match.group(1) for worker in workers if (match := re.search(r"-n (\S+)@", worker)))
    assert len(workers) == 2 and names == ["worker1", "worker2"], workers

    api = ApiClient(stack.base_url)
    api.sign_up("ada@example.com", "a long enough password")
    status, task = api.post("/api/tasks", {"title": "Add x", "description": "x should exist", "category": "feature"})
    assert status == 201, task

    fake_llm.script(
        # Many small chunks, a little apart: the live log arrives as several events.
        ToolReply(input=PLAN, text="Planning the work step by step. " * 8, chunk_size=6, chunk_delay=0.01),
        ToolReply(name=EDITOR, input=CREATE_X, text="Writing app/x.py. ", chunk_size=4),
        TextReply("Created app/x.py."),
        ToolReply(input=PASS, text="Looks right. ", chunk_size=4),
    )
    with open_task_socket(stack, api.token, task["id"]) as socket_:
        status, run = api.post(f"/api/tasks/{task['id']}/start-pipeline")
        assert status == 202, run
        messages = receive_until(
            socket_, lambda m: m["type"] == "pipeline-complete", timeout=40, why=lambda: stack.log_tail()
        )

    ids = [message["id"] for message in messages]
    assert ids == sorted(set(ids)), "live events arrive once each, in order"
    phases = [m["data"]["status"] for m in messages if m["type"] == "phase-change"]
    assert phases == ["queued", "planning", "coding", "reviewing", "awaiting_approval"]
    logs = [m["data"] for m in messages if m["type"] == "agent-log"]
    assert {entry["agent"] for entry in logs} >= {"planner", "coder", "reviewer"}
    planner_text = "".join(entry["chunk"] for entry in logs if entry["agent"] == "planner")
    assert "Planning the work step by step." in planner_text
    assert sum(entry["agent"] == "planner" for entry in logs) > 1, "the planner's reply streamed in pieces"
    assert messages[-1]["data"]["result"] == "passed"

    status, body = api.get(f"/api/runs/{run['id']}")
    assert (status, body["status"]) == (200, "awaiting_approval")
    status, body = api.post(f"/api/runs/{run['id']}/approve")
    assert (status, body["status"]) == (200, "approved"), body
    status, body = api.get(f"/api/tasks/{task['id']}")
    assert (status, body["status"]) == (200, "done")

    left = stack.terminate()
    assert stack.process is not None and stack.process.returncode == 0, "supervisord exited"
    assert left == set(), [command_line(pid) for pid in left]


VIEWERS = 100


def test_one_run_s_events_reach_every_one_of_many_pages_once_each_in_order(
    stack: ProductionStack, fake_llm: FakeAnthropicServer
) -> None:
    """Many pages watching one run, held by the several daphne processes that share the
    port: each event is published once (the pub/sub layer), every process hands it to its
    own sockets, and every page gets the whole run, nothing lost."""
    stack.wait_healthy()
    web_processes = stack.web_processes()
    assert len(web_processes) == WEB_PROCESSES, [command_line(pid) for pid in web_processes]
    api = ApiClient(stack.base_url)
    api.sign_up("ada@example.com", "a long enough password")
    _, task = api.post("/api/tasks", {"title": "Add x", "description": "x should exist", "category": "feature"})
    fake_llm.script(
        ToolReply(input=PLAN, text="Planning the work step by step. " * 8, chunk_size=6, chunk_delay=0.01),
        ToolReply(name=EDITOR, input=CREATE_X, text="Writing app/x.py. ", chunk_size=4),
        TextReply("Created app/x.py."),
        ToolReply(input=PASS, text="Looks right. ", chunk_size=4),
    )
    with contextlib.ExitStack() as opened:
        pages = [opened.enter_context(open_task_socket(stack, api.token, task["id"])) for _ in range(VIEWERS)]
        owners = tcp_peer_owners(web_processes)
        holders = [owners[page.socket.getsockname()[:2]] for page in pages]
        # The kernel hands each connection to one process waiting in accept: both took some.
        assert set(holders) == web_processes, Counter(holders)
        status, run = api.post(f"/api/tasks/{task['id']}/start-pipeline")
        assert status == 202, run
        seen = [
            receive_until(page, lambda m: m["type"] == "pipeline-complete", timeout=60, why=stack.log_tail)
            for page in pages
        ]

    stored = list(RunEvent.objects.filter(task_id=task["id"]).order_by("id").values_list("id", "type"))
    assert sum(kind == "agent-log" for _, kind in stored) > 1
    for holder, messages in zip(holders, seen, strict=True):
        assert [(m["id"], m["type"]) for m in messages] == stored, f"a page held by process {holder}"


def test_a_killed_worker_comes_back_its_run_goes_on_and_the_web_keeps_serving(
    stack: ProductionStack, fake_llm: FakeAnthropicServer
) -> None:
    """The issue's scenario: the worker dies in the middle of a phase. The web server and
    beat go on (same processes), supervisord starts a new worker, and the run goes on
    within 15 s (the lease runs out, beat's sweeper queues it, the new worker takes it),
    paying again only for the call the kill cut off."""
    stack.wait_healthy()
    before = stack.programs()
    assert set(before) == {"web", "worker", "beat"}, before
    api = ApiClient(stack.base_url)
    api.sign_up("ada@example.com", "a long enough password")
    _, task = api.post("/api/tasks", {"title": "Add x", "description": "x should exist", "category": "feature"})
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input=CREATE_X, text="slow " * 3000, chunk_size=5, chunk_delay=0.02),
    )
    status, run = api.post(f"/api/tasks/{task['id']}/start-pipeline")
    assert status == 202, run

    def coder_streams() -> bool:
        return RunEvent.objects.filter(run_id=run["id"], type="agent-log", data__agent="coder").exists()

    wait_for(coder_streams, timeout=30, why=stack.log_tail)
    fake_llm.script(*CODER, ToolReply(input=PASS))
    health: list[int | str] = []
    polling = threading.Event()

    def poll_health() -> None:
        while not polling.wait(0.25):
            try:
                health.append(stack.health()[0])
            except OSError as exc:
                health.append(repr(exc))

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        # The worker and its pool, as the kernel's OOM killer or a crash would end them.
        assert os.getpgid(before["worker"]) == before["worker"], "supervisord runs each program in its own group"
        os.killpg(before["worker"], signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: not is_same_process(before["worker"]), timeout=5)
        last_event = RunEvent.objects.filter(run_id=run["id"]).latest("id").pk
        # A new worker's start-up (30 s and more on a loaded box), then the lease and the sweep.
        wait_for(
            lambda: RunEvent.objects.filter(run_id=run["id"], id__gt=last_event).exists(),
            timeout=90,
            why=stack.log_tail,
        )
        resumed_after = time.monotonic() - killed_at
        wait_for(
            lambda: api.get(f"/api/runs/{run['id']}")[1]["status"] == "awaiting_approval",
            timeout=60,
            why=stack.log_tail,
        )
    finally:
        polling.set()
        poller.join(10)

    # "Within 15 s" is the design's sum — a lease that runs out, then beat's next sweep —
    # checked on the settings; the time itself is printed, never asserted (a loaded
    # machine only adds to it: seen 23 s at load 26 on two cores).
    print(f"\nrun going on again {resumed_after:.1f} s after its worker was killed")
    assert settings.PIPELINE_LEASE_SECONDS + settings.PIPELINE_SWEEP_SECONDS < 15
    after = stack.programs()
    assert after["web"] == before["web"] and after["beat"] == before["beat"], "web and beat went on"
    assert after["worker"] != before["worker"], "a new worker"
    assert health and set(health) == {200}, f"the web answered throughout: {health}"
    log = stack.log.read_text(errors="replace")
    assert "exited: worker (terminated by SIGKILL; not expected)" in log
    assert f"Run {run['id']} has no live worker; queueing it again" in log, "beat's sweeper handed it on"
    # Bought once each, but for the Coder's answer the kill cut off.
    answering = [
        request.answer_tool or ("editor" if EDITOR in request.tool_names else "?") for request in fake_llm.requests
    ]
    assert answering == ["submit_plan", "editor", "editor", "editor", "submit_review"]
    assert AgentCall.objects.filter(run_id=run["id"]).count() == 4  # the Planner, the Coder's two turns, the Reviewer

    left = stack.terminate()
    assert left == set(), [command_line(pid) for pid in left]
