from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from pipelines.models import PipelineRun, RunStatus
from pipelines.phases.driver import run_advance
from pipelines.runs.services import NO_API_KEY, run_start
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply, coder_creates

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}


def read_stream(response) -> str:
    async def collect() -> str:
        return "".join([c.decode() if isinstance(c, bytes) else c async for c in response.streaming_content])

    return async_to_sync(collect)()


@pytest.fixture
def task(project):
    return TaskFactory(project=project, title="Add x")


def _finish(run_id: int) -> PipelineRun:
    for _ in range(10):
        run = PipelineRun.objects.get(pk=run_id)
        if run.status in (RunStatus.AWAITING_APPROVAL, RunStatus.FAILED, RunStatus.PAUSED, RunStatus.CANCELLED):
            return run
        run_advance(run_id=run_id)
    raise AssertionError("run did not settle")


@pytest.fixture
def awaiting_run(fake_llm, task, owner) -> PipelineRun:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    return _finish(run_start(task=task, user=owner).pk)


def test_start_returns_202_with_the_run_and_a_second_start_is_409(fake_llm, owner_client, task) -> None:
    response = owner_client.post(f"/api/tasks/{task.pk}/start-pipeline")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued"
    assert body["task"] == task.pk
    assert body["number"] == 1
    assert "cancel" in body["allowed_actions"]
    again = owner_client.post(f"/api/tasks/{task.pk}/start-pipeline/")
    assert again.status_code == 409
    assert again.json()["code"] == "run_active"
    assert PipelineRun.objects.filter(task=task).count() == 1


def test_start_without_any_key_says_how_to_add_one(owner_client, task, settings) -> None:
    settings.ANTHROPIC_API_KEY = ""
    settings.LLM_DEMO_MODE = False
    response = owner_client.post(f"/api/tasks/{task.pk}/start-pipeline")
    assert response.status_code == 400
    assert response.json() == {"message": NO_API_KEY, "code": "missing_api_key", "extra": {}}
    assert not PipelineRun.objects.exists()


def test_a_key_given_on_start_is_stored_encrypted_and_used(fake_llm, owner_client, task, settings) -> None:
    settings.ANTHROPIC_API_KEY = ""
    user_key = "sk-ant-user-supplied-key-1234"
    response = owner_client.post(f"/api/tasks/{task.pk}/start-pipeline", HTTP_X_ANTHROPIC_KEY=user_key)
    assert response.status_code == 202
    run = PipelineRun.objects.get(pk=response.json()["id"])
    assert user_key not in run.api_key_encrypted
    assert run.api_key_encrypted
    assert user_key not in response.content.decode()
    fake_llm.script(ToolReply(input=PLAN))
    run_advance(run_id=run.pk)
    sent = fake_llm.requests[0].headers
    assert user_key in (sent.get("X-Api-Key", "") + sent.get("Authorization", ""))


def test_run_detail_list_and_diff(awaiting_run, owner_client, task) -> None:
    detail = owner_client.get(f"/api/runs/{awaiting_run.pk}").json()
    assert detail["status"] == "awaiting_approval"
    assert detail["plan"] == PLAN["subtasks"]
    assert set(detail["allowed_actions"]) == {"cancel", "retry", "request_changes", "approve", "download_patch"}
    assert float(detail["cost_usd"]) > 0
    runs = owner_client.get(f"/api/tasks/{task.pk}/runs").json()
    assert runs["count"] == 1
    assert runs["results"][0]["id"] == awaiting_run.pk
    diff = owner_client.get(f"/api/runs/{awaiting_run.pk}/diff").json()
    assert diff["stats"] == {"files_changed": 1, "lines_added": 1, "lines_removed": 0}
    assert diff["files"][0]["path"] == "app/x.py"
    assert diff["files"][0]["language"] == "Python"
    assert "+x = 1" in diff["files"][0]["diff"]


def test_approve_moves_the_task_to_done(awaiting_run, owner_client, task) -> None:
    response = owner_client.post(f"/api/runs/{awaiting_run.pk}/approve")
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    task.refresh_from_db()
    assert task.status == "done"
    again = owner_client.post(f"/api/runs/{awaiting_run.pk}/approve")
    assert again.status_code == 400
    assert again.json()["code"] == "invalid_transition"


def test_request_changes_needs_feedback(awaiting_run, owner_client) -> None:
    empty = owner_client.post(f"/api/runs/{awaiting_run.pk}/request-changes", {"feedback": "   "}, format="json")
    assert empty.status_code == 400
    assert "feedback" in empty.json()["extra"]["fields"]
    wrong_type = owner_client.post(f"/api/runs/{awaiting_run.pk}/request-changes", {"feedback": 5}, format="json")
    assert wrong_type.status_code == 400
    ok = owner_client.post(f"/api/runs/{awaiting_run.pk}/request-changes", {"feedback": "Rename x"}, format="json")
    assert ok.status_code == 202
    assert ok.json()["status"] == "coding"
    assert ok.json()["feedback"] == "Rename x"


def test_cancel_then_retry_starts_a_new_run(fake_llm, owner_client, task, owner) -> None:
    run = run_start(task=task, user=owner)
    cancelled = owner_client.post(f"/api/runs/{run.pk}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert owner_client.post(f"/api/runs/{run.pk}/cancel").status_code == 400
    retried = owner_client.post(f"/api/runs/{run.pk}/retry")
    assert retried.status_code == 202
    assert retried.json()["number"] == 2
    assert retried.json()["status"] == "queued"


def test_sse_replays_events_and_resumes_after_last_event_id(awaiting_run, owner_client, task) -> None:
    response = owner_client.get(f"/api/tasks/{task.pk}/events?follow=false", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    body = read_stream(response)
    frames = [f for f in body.split("\n\n") if f.startswith("id: ")]
    ids = [int(f.split("\n")[0].removeprefix("id: ")) for f in frames]
    assert ids == sorted(ids) and len(ids) >= 5
    assert "event: pipeline-complete" in frames[-1]
    resumed = owner_client.get(
        f"/api/tasks/{task.pk}/events?follow=false", HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID=str(ids[-3])
    )
    resumed_ids = [
        int(f.split("\n")[0].removeprefix("id: ")) for f in read_stream(resumed).split("\n\n") if f.startswith("id: ")
    ]
    assert resumed_ids == ids[-2:]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/api/tasks/{task}/start-pipeline"),
        ("get", "/api/tasks/{task}/runs"),
        ("get", "/api/tasks/{task}/events?follow=false"),
        ("get", "/api/runs/{run}"),
        ("get", "/api/runs/{run}/diff"),
        ("post", "/api/runs/{run}/cancel"),
        ("post", "/api/runs/{run}/retry"),
        ("post", "/api/runs/{run}/request-changes"),
        ("post", "/api/runs/{run}/approve"),
    ],
)
def test_other_user_gets_404_and_anonymous_401(awaiting_run, task, other_client, anon_client, method, path) -> None:
    url = path.format(task=task.pk, run=awaiting_run.pk)
    send = {
        "post": lambda: other_client.post(url, {"feedback": "x"}, format="json"),
        "get": lambda: other_client.get(url),
    }
    other = send[method]()
    assert other.status_code == 404
    assert "awaiting" not in other.content.decode()
    anon = getattr(anon_client, method)(url)
    assert anon.status_code == 401
    awaiting_run.refresh_from_db()
    assert awaiting_run.status == RunStatus.AWAITING_APPROVAL
