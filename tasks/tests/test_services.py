from __future__ import annotations

import pytest

from core.exceptions import InvalidTransition
from tasks.models import MANUAL_TRANSITIONS, Task, TaskStatus, TaskStatusChange, allowed_moves
from tasks.services import task_create, task_move
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

ALL_PAIRS = [(a, b) for a in TaskStatus.values for b in TaskStatus.values if a != b]
EXPECTED_ALLOWED = {
    ("backlog", "spec"),
    ("spec", "backlog"),
    ("spec", "building"),
    ("building", "review"),
    ("review", "building"),
    ("review", "done"),
    ("building", "backlog"),
    ("review", "backlog"),
    ("done", "backlog"),
}


def test_transition_table_is_exactly_the_documented_one() -> None:
    table = {(a, b) for a, targets in MANUAL_TRANSITIONS.items() for b in targets}
    assert table == EXPECTED_ALLOWED


@pytest.mark.parametrize(("from_status", "to_status"), ALL_PAIRS)
def test_manual_move_follows_the_table(project, from_status: str, to_status: str) -> None:
    task = TaskFactory(project=project, status=from_status)
    if (from_status, to_status) in EXPECTED_ALLOWED:
        task_move(task=task, status=to_status)
        task.refresh_from_db()
        assert task.status == to_status
        assert TaskStatusChange.objects.filter(task=task, from_status=from_status, to_status=to_status).count() == 1
    else:
        with pytest.raises(InvalidTransition) as excinfo:
            task_move(task=task, status=to_status)
        assert excinfo.value.extra == {"allowed": allowed_moves(from_status)}
        task.refresh_from_db()
        assert task.status == from_status
        assert not TaskStatusChange.objects.filter(task=task).exists()


def test_pipeline_may_move_along_any_column(project) -> None:
    task = TaskFactory(project=project, status=TaskStatus.BACKLOG)
    task_move(task=task, status=TaskStatus.DONE, by_pipeline=True, reason="approved")
    assert Task.objects.get(pk=task.pk).status == TaskStatus.DONE


def test_move_inserts_at_position_and_renumbers_column(project) -> None:
    column = [task_create(project=project, title=f"t{i}") for i in range(4)]
    moved = column[3]
    task_move(task=moved, status=TaskStatus.BACKLOG, position=1)
    column = Task.objects.filter(project=project, status="backlog").order_by("position")
    assert list(column.values_list("title", flat=True)) == ["t0", "t3", "t1", "t2"]
    assert list(column.values_list("position", flat=True)) == [0, 1, 2, 3]


def test_move_to_other_column_defaults_to_last(project) -> None:
    TaskFactory(project=project, status="spec", position=0)
    TaskFactory(project=project, status="spec", position=1)
    task = task_create(project=project, title="new")
    task_move(task=task, status="spec")
    assert Task.objects.get(pk=task.pk).position == 2
