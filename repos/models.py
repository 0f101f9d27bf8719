from __future__ import annotations

from django.db import models

from core.models import TimeStampedModel


class MergeStrategy(models.TextChoices):
    MERGE = "merge", "Merge commit"
    FF_ONLY = "ff_only", "Fast-forward only"


class RepositoryStatus(models.TextChoices):
    CLONING = "cloning", "Cloning"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class Repository(TimeStampedModel):
    """A git repository on the server that a project's runs work on."""

    project = models.OneToOneField("projects.Project", on_delete=models.CASCADE, related_name="repository")
    path = models.CharField(max_length=1000, help_text="The working tree's resolved path, under REPOS_ROOT.")
    origin_url = models.CharField(max_length=1000, blank=True, help_text="Where it was cloned from, if cloned.")
    base_branch = models.CharField(max_length=255, blank=True, help_text="Runs branch from and merge into this.")
    merge_strategy = models.CharField(max_length=16, choices=MergeStrategy.choices, default=MergeStrategy.MERGE)
    test_command = models.CharField(
        max_length=1000, blank=True, help_text="Run in each run's worktree after coding, e.g. pytest -q."
    )
    status = models.CharField(max_length=16, choices=RepositoryStatus.choices, default=RepositoryStatus.READY)
    error = models.TextField(blank=True)

    class Meta:
        verbose_name_plural = "repositories"

    def __str__(self) -> str:
        return self.origin_url or self.path
