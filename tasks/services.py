"""Tasks: create, edit, delete, and the one service that moves a task between columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import Max, Q

from core.exceptions import InvalidTransition
from projects.models import Project

from .models import MANUAL_TRANSITIONS, Task, TaskStatus, TaskStatusChange, allowed_moves

if TYPE_CHECKING:
    from accounts.models import User

EDITABLE_FIELDS = ("title", "description", "category", "priority")


def invalid_move_message(from_status: str, to_status: str) -> str:
    allowed = ", ".join(allowed_moves(from_status))
    return f"A task in {from_status} cannot be moved to {to_status} by hand. Allowed: {allowed}."


def _next_position(*, project_id: int, status: str) -> int:
    last = Task.objects.filter(project_id=project_id, status=status).aggregate(last=Max("position"))["last"]
    return 0 if last is None else last + 1


def task_create(
    *,
    project: Project,
    title: str,
    description: str = "",
    category: str = "",
    priority: str = "",
    coder_agent: str = "",
    actor: User | None = None,
) -> Task:
    """New tasks go to the bottom of the backlog."""
    task = Task(
        project=project,
        title=title.strip(),
        description=description.strip(),
        status=TaskStatus.BACKLOG,
        coder_agent=coder_agent.strip(),
    )
    if category:
        task.category = category
    if priority:
        task.priority = priority
    task.full_clean(exclude=["position"])
    with transaction.atomic():
        task.position = _next_position(project_id=project.pk, status=task.status)
        task.save()
        TaskStatusChange.objects.create(task=task, from_status="", to_status=task.status, actor=actor, reason="created")
    return task


def task_update(
    *,
    task: Task,
    title: str | None = None,
    description: str | None = None,
    category: str | None = None,
    priority: str | None = None,
    coder_agent: str | None = None,
) -> Task:
    """Edit a task's text, labels and Coder. Its column changes only through task_move."""
    changes = {
        "title": title,
        "description": description,
        "category": category,
        "priority": priority,
        "coder_agent": coder_agent,
    }
    changed = []
    for field, value in changes.items():
        if value is None:
            continue
        setattr(task, field, value.strip() if field in ("title", "description", "coder_agent") else value)
        changed.append(field)
    if not changed:
        return task
    task.full_clean()
    task.save(update_fields=[*changed, "updated_at"])
    return task


def task_delete(*, task: Task) -> None:
    task.delete()


def task_move(
    *,
    task: Task,
    status: str,
    position: int | None = None,
    actor: User | None = None,
    by_pipeline: bool = False,
    reason: str = "",
) -> Task:
    """Move a task to ``status`` at ``position`` (an index in that column; default: last).

    Moves by hand must follow MANUAL_TRANSITIONS; the pipeline moves a task along its
    columns as a run progresses. Positions in the target column are renumbered from 0
    in the same transaction, so concurrent moves never leave two cards in one slot.
    """
    if status not in TaskStatus.values:
        raise InvalidTransition(f"Unknown status {status!r}.", extra={"allowed": list(TaskStatus.values)})
    with transaction.atomic():
        # The card and the target column's cards, locked in one statement in id order:
        # locking the card first and its new column after deadlocked two cards crossing
        # between two columns (50 runs started at once on PostgreSQL, bench_events.py).
        locked = list(
            Task.objects.select_for_update()
            .filter(Q(pk=task.pk) | Q(project_id=task.project_id, status=status))
            .order_by("id")
        )
        current = next((row for row in locked if row.pk == task.pk), None)
        if current is None:
            raise Task.DoesNotExist(f"Task {task.pk} does not exist.")
        from_status = current.status
        if status != from_status and not by_pipeline and status not in MANUAL_TRANSITIONS[from_status]:
            raise InvalidTransition(
                invalid_move_message(from_status, status), extra={"allowed": allowed_moves(from_status)}
            )
        siblings = sorted(
            (row for row in locked if row.pk != current.pk and row.status == status),
            key=lambda row: (row.position, row.pk),
        )
        index = len(siblings) if position is None else max(0, min(position, len(siblings)))
        siblings.insert(index, current)
        current.status = status
        renumbered = []
        for new_position, sibling in enumerate(siblings):
            if sibling.position != new_position or sibling.pk == current.pk:
                sibling.position = new_position
                renumbered.append(sibling)
        Task.objects.bulk_update(renumbered, ["position"])
        current.save(update_fields=["status", "position", "updated_at"])
        if status != from_status:
            TaskStatusChange.objects.create(
                task=current, from_status=from_status, to_status=status, actor=actor, reason=reason[:200]
            )
    task.status, task.position, task.updated_at = current.status, current.position, current.updated_at
    return task
