"""A run that fails or is cancelled takes its card back to the column it was started
from, with the run's chip on it, and the move is recorded like any other."""

from __future__ import annotations

import pytest
from django.urls import reverse

from pipelines.models import PipelineRun, RunStatus
from pipelines.runs.services import run_cancel, run_retry, run_start
from tasks.models import Task, TaskStatus, TaskStatusChange
from tasks.services import task_move
from tests.factories import TaskFactory
from tests.fake_anthropic import HttpError, TextReply, ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}
FAIL = {"pass": False, "findings": [{"file": "app/x.py", "line": 1, "severity": "major", "message": "x must be 2"}]}
INVALID_PLANS = [ToolReply(input={"nothing": True}) for _ in range(2)]
OVERLOADED = [HttpError(529, "overloaded_error") for _ in range(4)]


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def column_of(task: Task) -> str:
    return Task.objects.values_list("status", flat=True).get(pk=task.pk)


def last_move(task: Task) -> TaskStatusChange:
    return TaskStatusChange.objects.filter(task=task).order_by("-id").first()


def awaiting_approval(fake_llm, task: Task, owner) -> PipelineRun:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert column_of(task) == TaskStatus.REVIEW
    return run


def test_a_run_records_the_column_it_was_started_from(fake_llm, task: Task, owner) -> None:
    task_move(task=task, status=TaskStatus.SPEC, actor=owner)
    run = run_start(task=task, user=owner)
    assert PipelineRun.objects.get(pk=run.pk).started_from_column == TaskStatus.SPEC


def test_a_run_failed_by_the_api_while_planning_returns_its_card(fake_llm, task: Task, owner) -> None:
    fake_llm.script(HttpError(401, "authentication_error"))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert column_of(task) == TaskStatus.BACKLOG
    move = last_move(task)
    assert (move.from_status, move.to_status, move.reason) == (TaskStatus.SPEC, TaskStatus.BACKLOG, "run 1: failed")


def test_a_run_whose_reviews_never_pass_returns_its_card_to_spec(fake_llm, task: Task, owner) -> None:
    task_move(task=task, status=TaskStatus.SPEC, actor=owner)
    fake_llm.script(
        ToolReply(input=PLAN),
        *[reply for _ in range(3) for reply in (TextReply("Nothing to change."), ToolReply(input=FAIL))],
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert column_of(task) == TaskStatus.SPEC
    assert last_move(task).from_status == TaskStatus.BUILDING


def test_an_invalid_answer_fails_the_run_and_returns_its_card(fake_llm, task: Task, owner) -> None:
    # The Planner answers without subtasks twice (one retry), and the run gives up.
    fake_llm.script(*INVALID_PLANS)
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert column_of(task) == TaskStatus.BACKLOG


def test_a_run_cancelled_awaiting_approval_returns_its_card(fake_llm, task: Task, owner) -> None:
    run = awaiting_approval(fake_llm, task, owner)
    run_cancel(run=run, actor=owner)
    assert column_of(task) == TaskStatus.BACKLOG
    move = last_move(task)
    assert (move.from_status, move.actor, move.reason) == (TaskStatus.REVIEW, owner, "run 1: cancelled")
    assert Task.objects.get(pk=task.pk).pipeline_state["status"] == RunStatus.CANCELLED


def test_a_paused_run_keeps_its_card_until_it_is_cancelled(fake_llm, task: Task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), *OVERLOADED)
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.PAUSED
    assert column_of(task) == TaskStatus.BUILDING, "a paused run waits for a person's Retry where it stopped"
    run_cancel(run=run, actor=owner)
    assert column_of(task) == TaskStatus.BACKLOG


def test_a_run_out_of_budget_pauses_and_keeps_its_card(fake_llm, task: Task, owner, settings, client) -> None:
    settings.RUN_TOKEN_BUDGET = 1000
    settings.LLM_MAX_TOKENS = 900
    fake_llm.script(ToolReply(input=PLAN, input_tokens=50, output_tokens=60))  # no room for the Coder's call
    run = drive_in_process(run_start(task=task, user=owner))
    assert (run.status, run.phase) == (RunStatus.PAUSED, RunStatus.CODING)
    assert column_of(task) == TaskStatus.BUILDING
    client.force_login(owner)
    building = client.get(reverse("tasks:card", args=[task.pk])).content.decode()
    assert 'data-status="building"' in building and "run-chip-paused" in building
    run_cancel(run=run, actor=owner)
    assert column_of(task) == TaskStatus.BACKLOG


def test_a_superseded_run_returns_the_card_and_the_new_run_starts_from_there(fake_llm, task: Task, owner) -> None:
    old = awaiting_approval(fake_llm, task, owner)
    new = run_retry(run=old, actor=owner)
    assert PipelineRun.objects.get(pk=old.pk).status == RunStatus.CANCELLED
    assert column_of(task) == TaskStatus.BACKLOG
    assert new.started_from_column == TaskStatus.BACKLOG


def test_a_queued_run_cancelled_leaves_the_card_where_a_person_put_it(task: Task, owner, fake_llm) -> None:
    run = run_start(task=task, user=owner)
    task_move(task=task, status=TaskStatus.SPEC, actor=owner)  # while it waits in line
    run_cancel(run=run, actor=owner)
    assert column_of(task) == TaskStatus.SPEC


def test_a_card_a_person_moved_out_of_the_runs_columns_stays(fake_llm, task: Task, owner) -> None:
    run = awaiting_approval(fake_llm, task, owner)
    task_move(task=task, status=TaskStatus.DONE, actor=owner)
    run_cancel(run=run, actor=owner)
    assert column_of(task) == TaskStatus.DONE


def test_a_run_from_before_the_column_was_recorded_leaves_its_card(fake_llm, task: Task, owner) -> None:
    run = awaiting_approval(fake_llm, task, owner)
    PipelineRun.objects.filter(pk=run.pk).update(started_from_column="")
    run.refresh_from_db()
    run_cancel(run=run, actor=owner)
    assert column_of(task) == TaskStatus.REVIEW


def test_retrying_a_failed_run_from_its_column_works(fake_llm, task: Task, owner) -> None:
    fake_llm.script(HttpError(401, "authentication_error"))
    failed = drive_in_process(run_start(task=task, user=owner))
    assert column_of(task) == TaskStatus.BACKLOG
    fake_llm.reset()
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    again = drive_in_process(run_retry(run=failed, actor=owner))
    assert (again.number, again.status, again.started_from_column) == (2, RunStatus.AWAITING_APPROVAL, "backlog")
    assert column_of(task) == TaskStatus.REVIEW


def test_the_board_shows_the_failed_runs_chip_and_cost_in_its_column(fake_llm, task: Task, owner, client) -> None:
    fake_llm.script(*INVALID_PLANS)
    drive_in_process(run_start(task=task, user=owner))
    client.force_login(owner)
    html = client.get(reverse("tasks:board")).content.decode()
    backlog = html.split('data-status="backlog"', 1)[1].split('data-column data-status="spec"', 1)[0]
    assert f'data-task-id="{task.pk}"' in backlog
    assert "run-chip-failed" in backlog
    cost = Task.objects.get(pk=task.pk).total_cost
    assert cost and cost > 0
    assert "card-cost" in backlog


def test_the_migration_gives_active_runs_the_column_their_card_left(fake_llm, task: Task, owner) -> None:
    import importlib

    from django.apps import apps

    fake_llm.script(ToolReply(input=PLAN), *OVERLOADED)
    paused = drive_in_process(run_start(task=task, user=owner))  # moved its card Backlog → Spec → Building
    waiting = run_start(task=TaskFactory(project=task.project, status=TaskStatus.SPEC), user=owner)
    PipelineRun.objects.update(started_from_column="")
    Task.objects.filter(pk=task.pk).update(pipeline_state={"run_id": paused.pk, "status": "paused"})
    migration = importlib.import_module("pipelines.migrations.0010_run_started_from_column")
    migration.backfill(apps, None)
    paused.refresh_from_db()
    waiting.refresh_from_db()
    assert (paused.started_from_column, waiting.started_from_column) == (TaskStatus.BACKLOG, TaskStatus.SPEC)
    assert Task.objects.get(pk=task.pk).pipeline_state["cost_usd"] == f"{paused.cost_usd:.6f}"
