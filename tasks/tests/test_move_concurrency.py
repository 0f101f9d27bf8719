"""Cards crossing between two columns at the same moment, on separate connections: no
deadlock, and every column keeps its positions 0…n-1. SQLite takes one lock for the whole
database, so the crossing can only deadlock on PostgreSQL's row locks."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings

from tasks.models import Task, TaskStatus
from tasks.services import task_move
from tests.factories import ProjectFactory, TaskFactory, UserFactory
from tests.threads import DatabaseThread

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
        reason="PostgreSQL is required (DATABASE_URL=postgres://…): SQLite has no row locks to deadlock on",
    ),
]

ROUNDS = 40


def test_cards_crossing_between_columns_never_deadlock() -> None:
    project = ProjectFactory(owner=UserFactory())
    backlog = [TaskFactory(project=project, status=TaskStatus.BACKLOG) for _ in range(3)]
    spec = [TaskFactory(project=project, status=TaskStatus.SPEC) for _ in range(3)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def shuttle(task: Task, there: str, back: str) -> None:
        try:
            start.wait()
            for _ in range(ROUNDS):
                task_move(task=task, status=there, by_pipeline=True)
                task_move(task=task, status=back, by_pipeline=True)
        except BaseException as error:  # a deadlock is an OperationalError here
            errors.append(error)

    threads = [
        DatabaseThread(target=shuttle, args=(backlog[0], TaskStatus.SPEC, TaskStatus.BACKLOG)),
        DatabaseThread(target=shuttle, args=(spec[0], TaskStatus.BACKLOG, TaskStatus.SPEC)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    for status in (TaskStatus.BACKLOG, TaskStatus.SPEC):
        positions = sorted(Task.objects.filter(project=project, status=status).values_list("position", flat=True))
        assert positions == list(range(len(positions)))
    assert Task.objects.filter(project=project).count() == len(backlog) + len(spec)
