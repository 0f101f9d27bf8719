"""A task's total cost (Task.total_cost, the board card's): what all its runs cost, kept by
the pipeline as calls are paid for, and backfilled for tasks run before it existed."""

from __future__ import annotations

import importlib
from decimal import Decimal

import pytest
from django.apps import apps
from kombu.exceptions import OperationalError

from pipelines.models import PipelineRun, RunStatus
from pipelines.runs import services
from pipelines.runs.costs import run_usage_add
from pipelines.runs.services import QueueUnavailable, run_start
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
# The Coder's editing conversation: it creates app/x.py, then says it is done.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


@pytest.fixture(autouse=True)
def server_key(settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-test"


@pytest.fixture
def no_queue(monkeypatch) -> None:
    monkeypatch.setattr("pipelines.runs.services._enqueue_advance", lambda run_id: None)


def _total(task: Task) -> Decimal | None:
    task.refresh_from_db()
    return task.total_cost


def test_each_calls_cost_lands_on_its_task(fake_llm, task, owner) -> None:
    assert _total(task) is None  # never run
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    first = drive_in_process(run_start(task=task, user=owner))
    assert first.status == RunStatus.AWAITING_APPROVAL
    assert first.cost_usd > Decimal(0)
    assert _total(task) == first.cost_usd

    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    second = drive_in_process(services.run_retry(run=first, actor=owner))
    assert second.pk != first.pk and second.cost_usd > Decimal(0)
    assert _total(task) == first.cost_usd + second.cost_usd


def test_a_started_run_costs_nothing_yet_and_usage_adds_up(task, owner, no_queue) -> None:
    run = run_start(task=task, user=owner)
    assert _total(task) == Decimal(0)
    run_usage_add(run=run, input_tokens=10, output_tokens=2, cost=Decimal("0.000123"))
    run_usage_add(run=run, input_tokens=5, output_tokens=1, cost=Decimal("0.01"))
    run.refresh_from_db()
    assert (run.input_tokens, run.output_tokens, run.cost_usd) == (15, 3, Decimal("0.010123"))
    assert _total(task) == Decimal("0.010123")


def test_deleting_a_run_recounts_its_task(task, owner, no_queue) -> None:
    first = run_start(task=task, user=owner)
    run_usage_add(run=first, input_tokens=0, output_tokens=0, cost=Decimal("0.5"))
    PipelineRun.objects.filter(pk=first.pk).update(status=RunStatus.CANCELLED)
    second = run_start(task=task, user=owner)
    run_usage_add(run=second, input_tokens=0, output_tokens=0, cost=Decimal("0.25"))
    assert _total(task) == Decimal("0.75")
    second.delete()
    assert _total(task) == Decimal("0.5")
    PipelineRun.objects.filter(task=task).delete()
    assert _total(task) is None
    task.delete()  # with no runs left, and with runs (below): nothing to recount
    other = TaskFactory(project=task.project)
    run_usage_add(run=run_start(task=other, user=owner), input_tokens=0, output_tokens=0, cost=Decimal("1"))
    other.delete()
    assert not Task.objects.exists()


def test_a_start_the_queue_refused_leaves_the_task_never_run(task, owner, monkeypatch) -> None:
    def broker_down(run_id: int) -> None:
        raise OperationalError("Connection refused.")

    monkeypatch.setattr("pipelines.runs.services._enqueue_advance", broker_down)
    with pytest.raises(QueueUnavailable):
        run_start(task=task, user=owner)
    assert _total(task) is None


def test_the_migration_backfills_each_tasks_total_from_its_runs(project, owner, no_queue) -> None:
    migration = importlib.import_module("pipelines.migrations.0005_backfill_task_total_cost")
    run_twice, run_free, never_run = (TaskFactory(project=project) for _ in range(3))
    first = run_start(task=run_twice, user=owner)
    PipelineRun.objects.filter(pk=first.pk).update(status=RunStatus.CANCELLED, cost_usd=Decimal("0.123456"))
    second = run_start(task=run_twice, user=owner)
    PipelineRun.objects.filter(pk=second.pk).update(cost_usd=Decimal("1.000001"))
    run_start(task=run_free, user=owner)
    Task.objects.update(total_cost=None)  # as before the field existed

    migration.backfill_total_cost(apps, None)

    assert _total(run_twice) == Decimal("1.123457")
    assert _total(run_free) == Decimal(0)
    assert _total(never_run) is None
