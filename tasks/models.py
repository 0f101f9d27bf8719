from __future__ import annotations

from django.conf import settings
from django.db import models

from core.coder_agents import CODER_AGENT_MAX_LENGTH, validate_coder_agent
from core.models import TimeStampedModel

TITLE_MAX_LENGTH = 200
DESCRIPTION_MAX_LENGTH = 50_000


class TaskStatus(models.TextChoices):
    BACKLOG = "backlog", "Backlog"
    SPEC = "spec", "Spec"
    BUILDING = "building", "Building"
    REVIEW = "review", "Review"
    DONE = "done", "Done"


class TaskCategory(models.TextChoices):
    FEATURE = "feature", "Feature"
    BUGFIX = "bugfix", "Bug fix"
    REFACTOR = "refactor", "Refactor"
    TEST = "test", "Test"
    DOCS = "docs", "Docs"
    CHORE = "chore", "Chore"


class TaskPriority(models.TextChoices):
    LOW = "low", "Low"
    MEDIUM = "medium", "Medium"
    HIGH = "high", "High"
    URGENT = "urgent", "Urgent"


# Moves a person may make by hand (board drag and drop, PATCH .../status). The pipeline
# moves tasks along the same columns as its runs progress. Staying in the same column
# (a reorder) is always allowed.
MANUAL_TRANSITIONS: dict[str, frozenset[str]] = {
    TaskStatus.BACKLOG: frozenset({TaskStatus.SPEC}),
    TaskStatus.SPEC: frozenset({TaskStatus.BACKLOG, TaskStatus.BUILDING}),
    TaskStatus.BUILDING: frozenset({TaskStatus.REVIEW, TaskStatus.BACKLOG}),
    TaskStatus.REVIEW: frozenset({TaskStatus.BUILDING, TaskStatus.DONE, TaskStatus.BACKLOG}),
    TaskStatus.DONE: frozenset({TaskStatus.BACKLOG}),
}


def allowed_moves(from_status: str) -> list[str]:
    """The columns a task in ``from_status`` may be moved to, in board order."""
    allowed = MANUAL_TRANSITIONS[from_status]
    return [status for status in TaskStatus.values if status in allowed]


class Task(TimeStampedModel):
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="tasks")
    title = models.CharField(max_length=TITLE_MAX_LENGTH)
    description = models.TextField(blank=True, max_length=DESCRIPTION_MAX_LENGTH)
    category = models.CharField(max_length=16, choices=TaskCategory.choices, default=TaskCategory.FEATURE)
    priority = models.CharField(max_length=16, choices=TaskPriority.choices, default=TaskPriority.MEDIUM)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.BACKLOG)
    position = models.PositiveIntegerField(default=0, help_text="Order within its column, from 0.")
    subtasks = models.JSONField(default=list, blank=True, help_text="Ordered subtasks from the Planner.")
    pipeline_state = models.JSONField(default=dict, blank=True, help_text="Summary of the latest pipeline run.")
    # Kept by the pipeline as its agent calls are paid for (the board card shows it).
    total_cost = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        editable=False,
        help_text="What all the task's pipeline runs cost, in USD; empty before its first run.",
    )
    # This task's Coder (core/coder_agents.py): empty = its project's.
    coder_agent = models.CharField(
        "Coder",
        max_length=CODER_AGENT_MAX_LENGTH,
        blank=True,
        default="",
        validators=[validate_coder_agent],
        help_text="Empty = the project's Coder; built-in, or a coding agent over ACP (ACP_AGENTS).",
    )

    class Meta:
        ordering = ["project", "status", "position", "id"]
        indexes = [models.Index(fields=["project", "status", "position"])]

    def __str__(self) -> str:
        return self.title


class TaskStatusChange(models.Model):
    """Audit row: one per column change, written with the change."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="status_changes")
    from_status = models.CharField(max_length=16, choices=TaskStatus.choices, blank=True)
    to_status = models.CharField(max_length=16, choices=TaskStatus.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.task_id}: {self.from_status or '∅'} → {self.to_status}"
