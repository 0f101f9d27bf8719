from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, Count, F, IntegerField, Q, QuerySet, Value, When, Window
from django.db.models.functions import RowNumber

from accounts.models import User
from core.selectors import one_or_not_found
from projects.models import Project

from .models import Task, TaskStatus, TaskStatusChange

TASK_NOT_FOUND = "Task not found."

# Board order of the columns, for sorting lists the way the board shows them.
COLUMN_ORDER = Case(
    *(When(status=status, then=Value(index)) for index, status in enumerate(TaskStatus.values)),
    output_field=IntegerField(),
)


def task_list(
    *,
    user: User,
    project: Project | None = None,
    status: str | None = None,
    category: str | None = None,
    q: str | None = None,
) -> QuerySet[Task]:
    """The user's tasks, optionally narrowed, in board order (column, then position)."""
    # With its project: the card and the API show the project's spending ceiling.
    tasks = Task.objects.filter(project__owner=user).select_related("project")
    if project is not None:
        tasks = tasks.filter(project=project)
    if status:
        tasks = tasks.filter(status=status)
    if category:
        tasks = tasks.filter(category=category)
    if q and q.strip():
        term = q.strip()
        tasks = tasks.filter(Q(title__icontains=term) | Q(description__icontains=term))
    return tasks.alias(column=COLUMN_ORDER).order_by("column", "position", "id")


def task_get_for_user(*, user: User, task_id: object) -> Task:
    """The user's task, or NotFound — also when it exists but is someone else's."""
    return one_or_not_found(Task.objects.select_related("project").filter(project__owner=user), task_id, TASK_NOT_FOUND)


# The board renders at most this many cards per column; "Show more" fetches the next
# slice. A column of 10,000 tasks rendered whole made a 5.5 MB page (bench_board.py).
BOARD_COLUMN_CAP = 100


@dataclass
class BoardColumn:
    status: str
    tasks: list[Task]
    total: int  # every task of the column that matches the filters, shown or not
    offset: int = 0  # index in the column of the first task in ``tasks``

    @property
    def remaining(self) -> int:
        """Matching tasks after this slice."""
        return max(0, self.total - self.offset - len(self.tasks))


def task_board(
    *,
    user: User,
    project: Project,
    category: str | None = None,
    q: str | None = None,
    limit: int = BOARD_COLUMN_CAP,
) -> dict[str, BoardColumn]:
    """The project's tasks by column, every column present: the first ``limit`` of each
    (in one query whatever the size of the project) and each column's exact count.

    Each task carries ``total_cost``: what all its pipeline runs cost (None without runs).
    """
    tasks = task_list(user=user, project=project, category=category, q=q)
    ranked = tasks.annotate(
        column_rank=Window(RowNumber(), partition_by=[F("status")], order_by=[F("position"), F("id")]),
        # Windows are computed before the rank filter applies: the count is the column's.
        column_total=Window(Count("id"), partition_by=[F("status")]),
    )
    columns = {status: BoardColumn(status=status, tasks=[], total=0) for status in TaskStatus.values}
    for task in ranked.filter(column_rank__lte=limit):
        column = columns[task.status]
        column.tasks.append(task)
        column.total = task.column_total
    return columns


def task_board_column(
    *,
    user: User,
    project: Project,
    status: str,
    offset: int,
    category: str | None = None,
    q: str | None = None,
    limit: int = BOARD_COLUMN_CAP,
) -> BoardColumn:
    """The next slice of one board column ("Show more"), with the column's exact count."""
    tasks = task_list(user=user, project=project, status=status, category=category, q=q)
    offset = max(0, offset)
    return BoardColumn(
        status=status,
        tasks=list(tasks[offset : offset + limit]),
        total=tasks.count(),
        offset=offset,
    )


def task_history(*, task: Task, limit: int = 20) -> QuerySet[TaskStatusChange]:
    """The task's column changes, newest first, with who made them."""
    return TaskStatusChange.objects.filter(task=task).select_related("actor").order_by("-created_at", "-id")[:limit]
