"""Redis stopped in the middle of a run, then started again.

The production processes (supervisord: daphne, a Celery worker, celery beat) run against a
private ``redis-server`` of this test, which it stops with SIGTERM while the Planner is
streaming. Meanwhile reads keep answering, /healthz says the broker is down, and a start
is refused with 503 and leaves nothing behind. With Redis back the run finishes without
anyone touching it, and a websocket that reconnects from the last event it saw gets
exactly the events it missed. The channel layer is the production one (pub/sub,
config/pubsub_layer.py), which loses what is published while a web process is not
subscribed: a page that kept its socket open through the outage is sent the events it
missed once the layer is subscribed again, and ends with every event of the run, once
each, in order.

The database is whatever the test run uses (PostgreSQL, or the SQLite file of the test
settings, which separate processes share): it needs only ``redis-server`` on this machine.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.models import AgentCall, PipelineRun, RunEvent
from pipelines.runs.services import BROKER_DOWN
from tests.fake_anthropic import EDITOR, FakeAnthropicServer, TextReply, ToolReply, coder_creates
from tests.processes import (
    ApiClient,
    ProductionStack,
    RedisServer,
    free_port,
    open_task_socket,
    receive_until,
    stack_env,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PLAN = {"subtasks": [{"id": "s1", "title": "Add x", "description": "Create app/x.py", "order": 1}]}
# The Coder's editing conversation: it creates app/x.py, then says it is done.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}
# The sweeper (in beat, every 2 s) re-queues a working run whose lease ran out: short here.
LEASE_SECONDS = 5


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(port=free_port(), workdir=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stack(fake_llm: FakeAnthropicServer, redis_server: RedisServer, tmp_path: Path) -> Iterator[ProductionStack]:
    port = free_port()
    env = stack_env(
        port=port,
        redis_url=redis_server.url,
        queue=f"autocoder-redis-fault-{uuid.uuid4().hex[:8]}",
        llm_url=fake_llm.url,
        workdir=tmp_path,
        PIPELINE_LEASE_SECONDS=str(LEASE_SECONDS),
    )
    stack = ProductionStack(port=port, log=tmp_path / "stack.log", env=env)
    stack.start()
    try:
        yield stack
    finally:
        stack.kill()


@pytest.mark.parametrize("how", ["terminated", "killed"])
def test_redis_stopped_mid_run_then_started_again(
    how: str, stack: ProductionStack, redis_server: RedisServer, fake_llm: FakeAnthropicServer
) -> None:
    stack.wait_healthy()
    api = ApiClient(stack.base_url)
    api.sign_up("ada@example.com", "a long enough password")
    _, task = api.post("/api/tasks", {"title": "Add x", "description": "x should exist", "category": "feature"})
    _, other = api.post("/api/tasks", {"title": "Add y", "description": "y should exist", "category": "feature"})

    fake_llm.script(
        # ~8 s of streaming: Redis goes away while the Planner is mid-reply.
        ToolReply(input=PLAN, text="thinking " * 160, chunk_size=9, chunk_delay=0.05),
        ToolReply(name=EDITOR, input=CREATE_X, text="Writing app/x.py. ", chunk_size=4),
        TextReply("Created app/x.py."),
        ToolReply(input=PASS, text="Looks right. ", chunk_size=4),
    )
    pages = contextlib.ExitStack()
    # A page that keeps its socket open through the outage.
    staying = pages.enter_context(open_task_socket(stack, api.token, task["id"]))
    with open_task_socket(stack, api.token, task["id"]) as socket_:
        status, run = api.post(f"/api/tasks/{task['id']}/start-pipeline")
        assert status == 202, run
        seen = receive_until(
            socket_,
            lambda m: m["type"] == "agent-log" and m["data"]["agent"] == "planner",
            timeout=30,
            why=lambda: stack.log_tail(),
        )
        last_seen = seen[-1]["id"]

        if how == "killed":
            redis_server.kill()
        else:
            redis_server.stop()
        stopped_at = time.monotonic()

        # Reads come from the database only.
        status, body = api.get(f"/api/tasks/{task['id']}")
        assert (status, body["id"]) == (200, task["id"]), body
        status, body = api.get(f"/api/runs/{run['id']}")
        assert (status, body["status"]) == (200, "planning"), body

        status, health = stack.health()
        assert status == 503, health
        assert health["broker"]["ok"] is False and health["database"]["ok"] is True, health

        status, body = api.post(f"/api/tasks/{other['id']}/start-pipeline")
        assert status == 503, body
        assert (body["code"], body["message"]) == ("queue_unavailable", BROKER_DOWN)
        assert not PipelineRun.objects.filter(task_id=other["id"]).exists()
        assert not RunEvent.objects.filter(task_id=other["id"]).exists()

        down_for = time.monotonic() - stopped_at
        print(f"Redis down for {down_for:.1f} s")
        time.sleep(max(0.0, 3 - down_for))
        redis_server.start()

    # Nobody presses anything: the run finishes on its own.
    def run_status() -> str:
        return str(api.get(f"/api/runs/{run['id']}")[1]["status"])

    wait_for(lambda: run_status() == "awaiting_approval", timeout=70, why=lambda: run_status() + stack.log_tail())
    status, health = stack.health()
    assert status == 200, health

    # A page that lost its socket reconnects from the last event it saw.
    with open_task_socket(stack, api.token, task["id"], last_event_id=last_seen) as socket_:
        missed = receive_until(socket_, lambda m: m["type"] == "pipeline-complete", timeout=10)
    expected = list(
        RunEvent.objects.filter(task_id=task["id"], id__gt=last_seen).order_by("id").values_list("id", "type")
    )
    assert [(m["id"], m["type"]) for m in missed] == expected
    phases = [m["data"]["status"] for m in missed if m["type"] == "phase-change"]
    assert phases == ["coding", "reviewing", "awaiting_approval"]
    # Tokens streamed while Redis was down were stored all the same: the log read live
    # and then replayed is the whole reply, each piece once.
    streamed = [
        m["data"]["chunk"] for m in seen + missed if m["type"] == "agent-log" and m["data"]["agent"] == "planner"
    ]
    stored = RunEvent.objects.filter(task_id=task["id"], type="agent-log", data__agent="planner").order_by("id")
    assert "".join(streamed) == "".join(event.data["chunk"] for event in stored)
    assert "".join(streamed).startswith("thinking " * 160)

    # The page that never closed its socket: live events before the outage, the missed
    # ones sent once the layer was subscribed again, live ones after; each once, in order.
    with pages:
        kept = receive_until(staying, lambda m: m["type"] == "pipeline-complete", timeout=10)
    everything = list(RunEvent.objects.filter(task_id=task["id"]).order_by("id").values_list("id", "type"))
    assert [(m["id"], m["type"]) for m in kept] == everything
    assert "sockets told to catch up" in stack.log.read_text(errors="replace")


def test_a_phase_ending_while_redis_is_down_is_requeued_by_the_sweeper(
    stack: ProductionStack, redis_server: RedisServer, fake_llm: FakeAnthropicServer
) -> None:
    """The Planner finishes while Redis is down: its plan is saved, but the job for the
    next phase cannot be queued. Beat's sweeper finds the run once the broker is back."""
    stack.wait_healthy()
    api = ApiClient(stack.base_url)
    api.sign_up("ada@example.com", "a long enough password")
    _, task = api.post("/api/tasks", {"title": "Add x", "description": "x should exist", "category": "feature"})
    fake_llm.script(
        ToolReply(input=PLAN, text="thinking " * 80, chunk_size=9, chunk_delay=0.05),  # ~4 s
        *CODER,
        ToolReply(input=PASS),
    )
    status, run = api.post(f"/api/tasks/{task['id']}/start-pipeline")
    assert status == 202, run
    wait_for(lambda: RunEvent.objects.filter(task_id=task["id"], type="agent-log").exists(), timeout=30)
    redis_server.stop()

    def run_row() -> PipelineRun:
        return PipelineRun.objects.get(pk=run["id"])

    # The plan is persisted with the move to coding, and nobody holds the phase.
    wait_for(lambda: run_row().status == "coding", timeout=20, why=lambda: stack.log_tail())
    assert not run_row().lease_owner
    assert run_row().plan == PLAN["subtasks"]
    # The planning job ends once its try at queueing the coding job has failed; only
    # then does Redis come back (sooner, and that try would simply succeed).
    wait_for(lambda: "pipeline_advance" in _jobs_ended(stack), timeout=30, why=lambda: stack.log_tail())
    redis_server.start()

    wait_for(
        lambda: run_row().status == "awaiting_approval", timeout=60, why=lambda: run_row().status + stack.log_tail()
    )
    log = stack.log.read_text()
    assert f"Run {run['id']}: could not queue its coding phase" in log, "the failed enqueue is stated"
    assert "queueing it again" in log, "the sweeper, not a redelivery, resumed the run"
    assert AgentCall.objects.filter(run_id=run["id"], agent="planner").count() == 1, "the plan was paid for once"


def _jobs_ended(stack: ProductionStack) -> str:
    """The worker's lines about jobs that finished, one way or the other."""
    lines = stack.log.read_text(errors="replace").splitlines()
    return "\n".join(line for line in lines if "Task " in line and (" succeeded in " in line or " raised " in line))
