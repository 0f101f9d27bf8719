from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import TimeStampedModel

FACT_MAX_LENGTH = 2000
GOAL_MAX_LENGTH = 1000
DEADLINE_MAX_LENGTH = 100


class Fact(TimeStampedModel):
    """Something the user told the agents to remember ([REMEMBER: …] or by hand)."""

    class Source(models.TextChoices):
        MANUAL = "manual", "Added by hand"
        MARKER = "marker", "From a reply"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="facts")
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="facts"
    )
    content = models.TextField(max_length=FACT_MAX_LENGTH)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.MANUAL)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"])]

    def __str__(self) -> str:
        return self.content[:80]


class Goal(TimeStampedModel):
    """A goal the user set ([GOAL: … | DEADLINE: …] or by hand); [DONE: …] completes it."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        COMPLETED = "completed", "Completed"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="goals")
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="goals"
    )
    text = models.TextField(max_length=GOAL_MAX_LENGTH)
    deadline = models.CharField(max_length=DEADLINE_MAX_LENGTH, blank=True, help_text="As the user said it.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    completed_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=Fact.Source.choices, default=Fact.Source.MANUAL)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "status", "-created_at"])]

    def __str__(self) -> str:
        return self.text[:80]
