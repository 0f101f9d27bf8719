"""The production topology end to end, as `make up-prod` starts it.

honcho runs the Procfile (daphne, a Celery worker, celery beat) against the test's
PostgreSQL database and Redis; the LLM is the fake Anthropic server of this process.
Everything after start-up goes through real clients only: HTTP for the API and a
websocket client for the live events, as a script on another machine would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tests.fake_anthropic import FakeAnthropicServer, ToolReply
from tests.processes import (
    ApiClient,
    ProductionStack,
    command_line,
    free_port,
    open_task_socket,
    receive_until,
    stack_env,
)
from tests.workers import delete_queue

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(settings.REDIS_URL is None, reason="REDIS_URL is unset"),
]

PLAN = {"subtasks": [{"id": "s1", "title": "Add x", "description": "Create app/x.py", "order": 1}]}
CHANGES = {"changes": [{"file_path": "app/x.py", "content": "x = 1\n", "action": "create"}]}
PASS = {"pass": True, "findings": []}


@pytest.fixture
def stack(fake_llm: FakeAnthropicServer, tmp_path: Path) -> Iterator[ProductionStack]:
    # A queue of this test's own: another worker on the shared Redis must not take its jobs.
    queue = f"autocoder-topology-{uuid.uuid4().hex[:10]}"
    port = free_port()
    assert settings.REDIS_URL is not None
    env = stack_env(port=port, redis_url=settings.REDIS_URL, queue=queue, llm_url=fake_llm.url, workdir=tmp_path)
    stack = ProductionStack(port=port, log=tmp_path / "honcho.log", env=env)
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
    assert health["worker"] == {**health["worker"], "ok": True, "mode": "heartbeat", "count": 1}
    # Three programs under honcho: daphne, the worker (with its pool) and beat.
    programs = " | ".join(command_line(pid) for pid in stack.children)
    for program in ("daphne", "celery -A config worker", "celery -A config beat"):
        assert program in programs, programs

    api = ApiClient(stack.base_url)
    api.sign_up("ada@example.com", "a long enough password")
    status, task = api.post("/api/tasks", {"title": "Add x", "description": "x should exist", "category": "feature"})
    assert status == 201, task

    fake_llm.script(
        # Many small chunks, a little apart: the live log arrives as several events.
        ToolReply(input=PLAN, text="Planning the work step by step. " * 8, chunk_size=6, chunk_delay=0.01),
        ToolReply(input=CHANGES, text="Writing app/x.py. ", chunk_size=4),
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
    assert stack.process is not None and stack.process.returncode is not None, "honcho exited"
    assert left == set(), [command_line(pid) for pid in left]
