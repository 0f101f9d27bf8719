from __future__ import annotations

from django.db.models import Case, IntegerField, Q, QuerySet, Sum, Value, When

from accounts.models import User
from core.exceptions import NotFound
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
    tasks = Task.objects.filter(project__owner=user)
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
    try:
        pk = int(str(task_id))
    except ValueError:
        raise NotFound(TASK_NOT_FOUND) from None
    task = Task.objects.select_related("project").filter(project__owner=user, pk=pk).first()
    if task is None:
        raise NotFound(TASK_NOT_FOUND)
    return task


def task_board(
    *, user: User, project: Project, category: str | None = None, q: str | None = None
) -> dict[str, list[Task]]:
    """The project's tasks grouped by column, every column present, in one query.

    Each task carries ``total_cost``: what all its pipeline runs cost (None without runs).
    """
    columns: dict[str, list[Task]] = {status: [] for status in TaskStatus.values}
    tasks = task_list(user=user, project=project, category=category, q=q).annotate(total_cost=Sum("runs__cost_usd"))
    for task in tasks:
        columns[task.status].append(task)
    return columns


def task_history(*, task: Task, limit: int = 20) -> QuerySet[TaskStatusChange]:
    """The task's column changes, newest first, with who made them."""
    return TaskStatusChange.objects.filter(task=task).select_related("actor").order_by("-created_at", "-id")[:limit]
