"""Which subtask the Coder is on: the service that moves the marker, the live event it
sends on commit, and the run panel's marks (pipelines/runs/services.py run_subtask_start,
pipelines/panel.py). The Coder's tool itself: test_coder_conversation.py."""

from __future__ import annotations

import pytest

from core import live
from pipelines.events import CONSUMER_MESSAGE_TYPE, task_group
from pipelines.models import PipelineRun, RunStatus
from pipelines.panel import panel_context
from pipelines.runs.services import StaleRun, run_subtask_start, run_transition
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

PLAN = [
    {"id": "s1", "title": "Parse the config", "description": "TOML in", "order": 1},
    {"id": "s2", "title": "Validate it", "description": "", "order": 2},
    {"id": "s3", "title": "Cover it with tests", "description": "", "order": 3},
]
LEASE = "worker-token"


@pytest.fixture
def task(project):
    return TaskFactory(project=project)


def coding_run(task, status: RunStatus = RunStatus.CODING) -> PipelineRun:
    return PipelineRun.objects.create(
        task=task, number=1, status=status, phase=status, plan=PLAN, lease_owner=LEASE, provider="anthropic"
    )


def test_the_marker_moves_and_the_task_page_is_told_on_commit(
    task, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    run = coding_run(task)
    sent: list[tuple[str, dict]] = []
    monkeypatch.setattr(live, "group_send_many", lambda sends: [sent.append(send) for send in sends])

    with django_capture_on_commit_callbacks(execute=True):
        run_subtask_start(run=run, order=2, held_by=LEASE)
        assert sent == []  # not before the marker is committed

    run.refresh_from_db()
    assert run.current_subtask == 2
    [(group, message)] = sent
    assert group == task_group(task.pk) and message["type"] == CONSUMER_MESSAGE_TYPE
    event = message["event"]
    assert event["type"] == "subtask-change"
    assert {key: event["data"][key] for key in ("run_id", "order", "position", "count", "title")} == {
        "run_id": run.pk,
        "order": 2,
        "position": 2,
        "count": 3,
        "title": "Validate it",
    }


def test_a_worker_without_the_lease_or_a_run_not_coding_moves_nothing(task) -> None:
    run = coding_run(task)
    with pytest.raises(StaleRun):
        run_subtask_start(run=run, order=2, held_by="someone-else")
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.REVIEWING, phase=RunStatus.REVIEWING)
    with pytest.raises(StaleRun):
        run_subtask_start(run=run, order=2, held_by=LEASE)
    run.refresh_from_db()
    assert run.current_subtask is None
    assert not run.events.filter(type="subtask-change").exists()


def test_every_change_of_status_clears_the_marker(task) -> None:
    run = coding_run(task)
    run_subtask_start(run=run, order=3, held_by=LEASE)
    run_transition(run=run, to_status=RunStatus.REVIEWING, reason="done", enqueue=False)
    run.refresh_from_db()
    assert run.current_subtask is None


@pytest.mark.parametrize("status", [RunStatus.CODING, RunStatus.FIXING])
def test_while_the_coder_works_the_panel_marks_the_current_subtask_and_those_before_it(task, status) -> None:
    run = coding_run(task, status)
    run_subtask_start(run=run, order=2, held_by=LEASE)

    subtasks = panel_context(task=task, partial=True)["subtasks"]

    assert [(s["title"], s["state"]) for s in subtasks] == [
        ("Parse the config", "done"),
        ("Validate it", "current"),
        ("Cover it with tests", "upcoming"),
    ]


def test_outside_coding_or_before_the_coder_names_one_nothing_is_marked(task) -> None:
    run = coding_run(task)
    assert [s["state"] for s in panel_context(task=task, partial=True)["subtasks"]] == ["", "", ""]
    # A marker left on a run that moved on (it cannot be, but the page does not trust it).
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.REVIEWING, current_subtask=2)
    subtasks = panel_context(task=task, partial=True)["subtasks"]
    assert [s["state"] for s in subtasks] == ["", "", ""]
    assert [s["title"] for s in subtasks] == ["Parse the config", "Validate it", "Cover it with tests"]
