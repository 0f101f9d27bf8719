"""The board follows each card's run live: the project's board socket is told of every
change of the run (naming the task), the card it then fetches again shows the run's
chip and cost, and the API says the latest run's state and cost. Nobody else sees any of it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client
from django.urls import reverse

from accounts.services import api_token_create
from core.consumers import CLOSE_NOT_FOUND
from pipelines.models import RunStatus
from pipelines.runs.services import run_start
from tasks.models import Task, TaskStatus
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply
from tests.sockets import open_socket
from tests.workers import drive_in_process

# The Planner answers without subtasks twice: two paid calls, then the run fails.
INVALID_PLANS = [ToolReply(input={"nothing": True}) for _ in range(2)]


def _token_header(user) -> tuple[bytes, bytes]:
    _, raw = api_token_create(user=user, name="ws")
    return (b"authorization", f"Token {raw}".encode())


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def _failed_run(task: Task, owner):
    return drive_in_process(run_start(task=task, user=owner))


@pytest.mark.django_db(transaction=True)
def test_the_board_socket_hears_each_change_of_the_cards_run_and_others_hear_nothing(
    fake_llm, owner, other_user, project, other_project, task
) -> None:
    fake_llm.script(*INVALID_PLANS)
    mine, theirs = _token_header(owner), _token_header(other_user)

    async def scenario() -> tuple[list[dict], bool, int | None]:
        board, connected, _ = await open_socket(f"/ws/projects/{project.pk}", mine)
        assert connected
        their_board, their_connected, _ = await open_socket(f"/ws/projects/{other_project.pk}", theirs)
        assert their_connected
        _, peeking, code = await open_socket(f"/ws/projects/{project.pk}", theirs)
        await database_sync_to_async(_failed_run)(task, owner)
        received = []
        while not await board.receive_nothing(timeout=0.5):
            received.append(await board.receive_json_from())
        assert await their_board.receive_nothing(timeout=0.3), "another user's board hears nothing of it"
        await board.disconnect()
        await their_board.disconnect()
        return received, peeking, code

    received, peeking, code = async_to_sync(scenario)()
    assert (peeking, code) == (False, CLOSE_NOT_FOUND)
    by_type: dict[str, list[dict]] = {}
    for message in received:
        by_type.setdefault(message["type"], []).append(message["data"])
    assert {data["task_id"] for kind in ("phase-change", "run-update") for data in by_type[kind]} == {task.pk}
    assert [data["status"] for data in by_type["phase-change"]] == ["queued", "planning", "failed"]
    assert len(by_type["run-update"]) == 2, "one per paid call"
    assert Decimal(by_type["run-update"][-1]["cost_usd"]) > 0
    assert [(data["old_status"], data["new_status"]) for data in by_type["task-status"]] == [
        ("backlog", "spec"),
        ("spec", "backlog"),
    ]


@pytest.mark.django_db
def test_the_card_the_board_fetches_shows_the_runs_chip_and_cost(
    fake_llm, owner, other_user, task, django_assert_max_num_queries
) -> None:
    fake_llm.script(*INVALID_PLANS)
    _failed_run(task, owner)
    client = Client()
    client.force_login(owner)
    url = reverse("tasks:card", args=[task.pk])
    with django_assert_max_num_queries(4):  # session, user, the task; no query for the chip
        response = client.get(url)
    html = response.content.decode()
    assert response.status_code == 200
    assert f'data-task-id="{task.pk}"' in html
    assert f'data-card-url="{url}"' in html
    assert 'data-status="backlog"' in html
    assert "run-chip-failed" in html
    cost = Task.objects.get(pk=task.pk).total_cost
    assert cost and f"${cost.quantize(Decimal('0.0001'))}" in html

    stranger = Client()
    stranger.force_login(other_user)
    assert stranger.get(url).status_code == 404
    assert Client().get(url).status_code == 302, "anonymous: to the sign-in page"


@pytest.mark.django_db
def test_the_api_says_the_latest_runs_state_and_cost(fake_llm, owner, owner_client, other_client, task) -> None:
    assert owner_client.get(f"/api/tasks/{task.pk}").json()["latest_run"] is None
    fake_llm.script(*INVALID_PLANS)
    run = _failed_run(task, owner)
    body = owner_client.get(f"/api/tasks/{task.pk}").json()
    run.refresh_from_db()
    assert run.cost_usd > 0
    assert body["latest_run"] == {
        "id": run.pk,
        "number": 1,
        "status": RunStatus.FAILED,
        "phase": RunStatus.PLANNING,
        "cost_usd": f"{run.cost_usd:.6f}",
        "provider": "anthropic",
        "model": run.model,
        "coder_agent": "",  # the built-in Coder
    }
    assert Decimal(body["total_cost"]) == run.cost_usd
    assert body["status"] == TaskStatus.BACKLOG
    listed = owner_client.get("/api/tasks").json()["results"][0]
    assert listed["latest_run"]["status"] == RunStatus.FAILED
    assert other_client.get(f"/api/tasks/{task.pk}").status_code == 404


@pytest.mark.django_db
def test_the_latest_runs_cost_grows_with_each_call_while_it_works(fake_llm, owner, owner_client, task) -> None:
    from pipelines.models import PipelineRun
    from pipelines.runs.costs import run_usage_add

    run = run_start(task=task, user=owner)
    run_usage_add(run=run, input_tokens=10, output_tokens=5, cost=Decimal("0.25"))
    assert owner_client.get(f"/api/tasks/{task.pk}").json()["latest_run"]["cost_usd"] == "0.250000"
    # A call of an older run (its worker finishing after a new run started) leaves the
    # new run's summary alone.
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    newer = run_start(task=task, user=owner)
    run_usage_add(run=run, input_tokens=10, output_tokens=5, cost=Decimal("1"))
    latest = owner_client.get(f"/api/tasks/{task.pk}").json()["latest_run"]
    assert (latest["id"], latest["cost_usd"]) == (newer.pk, "0.000000")


def test_the_schema_documents_the_latest_run() -> None:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    task = schema["components"]["schemas"]["Task"]["properties"]
    assert task["latest_run"]["readOnly"] is True
    assert "latest pipeline run" in task["latest_run"]["description"]
    latest = schema["components"]["schemas"]["LatestRun"]["properties"]
    assert set(latest) == {"id", "number", "status", "phase", "cost_usd", "provider", "model", "coder_agent"}
    assert latest["coder_agent"]["nullable"] is True  # null: a run from before runs recorded their Coder
    assert task["total_cost"]["readOnly"] is True
