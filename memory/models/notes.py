from __future__ import annotations

from django.conf import settings
from django.db import models


class AgentNote(models.Model):
    """An agent's long-term notes (markdown): per user and agent, one for all projects
    (``project`` null, the global notes) and one per project.

    A line may refer to a memory by a token (memory.references) instead of copying its
    text: the token is read at every use, so a memory edited or deleted is edited or gone
    in the notes too.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_notes")
    agent_id = models.CharField(max_length=50)
    project = models.ForeignKey(
        "projects.Project",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="agent_notes",
        help_text="Empty: the agent's global notes, given in every project.",
    )
    content = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent_id", "project_id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "agent_id", "project"], name="memory_agent_note_unique_project"),
            # NULLs are distinct in a unique index: the global notes need their own.
            models.UniqueConstraint(
                fields=["owner", "agent_id"],
                condition=models.Q(project__isnull=True),
                name="memory_agent_note_unique_global",
            ),
        ]

    def __str__(self) -> str:
        return f"Notes of {self.agent_id}" + (f" in project {self.project_id}" if self.project_id else "")


class AgentNoteRevision(models.Model):
    """The notes as they were before a summary replaced them."""

    note = models.ForeignKey(AgentNote, on_delete=models.CASCADE, related_name="revisions")
    content = models.TextField()
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Revision of {self.note_id} ({self.created_at:%Y-%m-%d %H:%M})"


class DailyLogEntry(models.Model):
    """One task of an agent's session, on the day it ran (the daily log)."""

    class Status(models.TextChoices):
        OK = "ok", "OK"
        ERROR = "error", "Error"
        CANCELLED = "cancelled", "Cancelled"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="daily_log_entries")
    agent_id = models.CharField(max_length=50)
    date = models.DateField(db_index=True)
    session = models.CharField(max_length=100, help_text="e.g. run-12 or chat-3")
    type = models.CharField(max_length=50)
    input_context_ids = models.JSONField(default=list, blank=True)
    output_context_id = models.CharField(max_length=40, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OK)
    error = models.TextField(blank=True)
    promoted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["date", "created_at", "id"]
        indexes = [models.Index(fields=["owner", "agent_id", "date"])]
        verbose_name_plural = "daily log entries"

    def __str__(self) -> str:
        return f"{self.agent_id} {self.date} {self.type} ({self.status})"
