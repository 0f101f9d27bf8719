from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from core.models import TimeStampedModel

from .forges import ForgeKind

FOLDER_OUTSIDE_ROOT = "Give a folder inside REPOS_ROOT (relative to it, or absolute)."


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
    # Pull requests (repos.forges): where a run's branch is pushed, and the forge that
    # gets the pull request. The token is encrypted (core.crypto) and never shown again;
    # the webhook secret is the server's, shown to the owner to paste into the forge.
    push_url = models.CharField(
        max_length=1000, blank=True, help_text="Where run branches are pushed; empty: the URL it was cloned from."
    )
    forge_kind = models.CharField(max_length=16, choices=ForgeKind.choices, blank=True)
    forge_api_url = models.CharField(max_length=500, blank=True, help_text="The forge's REST API base URL.")
    forge_repository = models.CharField(
        max_length=255, blank=True, help_text="The repository on the forge: owner/name (GitLab: group/…/project)."
    )
    forge_token_encrypted = models.TextField(blank=True, editable=False)
    forge_webhook_secret_encrypted = models.TextField(blank=True, editable=False)

    class Meta:
        verbose_name_plural = "repositories"

    def __str__(self) -> str:
        return self.origin_url or self.path

    @property
    def push_target(self) -> str:
        return self.push_url or self.origin_url

    @property
    def push_url_display(self) -> str:
        """The push URL as users name it: a local one relative to REPOS_ROOT."""
        return display_path(self.push_url) if self.push_url.startswith("/") else self.push_url

    @property
    def forge_configured(self) -> bool:
        return bool(self.forge_kind and self.forge_api_url and self.forge_repository and self.forge_token_encrypted)

    @property
    def display_path(self) -> str:
        """The folder as users name it: relative to REPOS_ROOT (server paths are not theirs)."""
        return display_path(self.path)


def display_path(path: str) -> str:
    root = str(Path(settings.REPOS_ROOT).resolve())
    return path[len(root) + 1 :] if path.startswith(root + "/") else Path(path).name


class RepositoryFolder(TimeStampedModel):
    """A folder under REPOS_ROOT that belongs to a user: the one whose project cloned it
    or first linked it, or to whom an operator granted it. Only its owner and the users
    it is shared with may link it, clone from it, or link anything inside it or around
    it; to anyone else it does not exist."""

    path = models.CharField(max_length=1000, unique=True, help_text="The folder's resolved path, under REPOS_ROOT.")
    owner = models.ForeignKey(
        "accounts.User", on_delete=models.CASCADE, related_name="repository_folders", help_text="Who holds it."
    )
    project = models.ForeignKey(
        "projects.Project",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The project that cloned or first linked it (empty when granted by an operator).",
    )
    shared_with = models.ManyToManyField(
        "accounts.User",
        blank=True,
        related_name="shared_repository_folders",
        help_text="Other users an operator allows to link this folder too.",
    )

    class Meta:
        ordering = ("path",)

    def __str__(self) -> str:
        return self.path

    def clean(self) -> None:
        # An operator may type a relative or unresolved path: store the real one.
        root = Path(settings.REPOS_ROOT).resolve()
        given = Path(self.path.strip())
        resolved = Path(os.path.realpath(given if given.is_absolute() else root / given))
        if root not in resolved.parents:
            raise ValidationError({"path": [FOLDER_OUTSIDE_ROOT]})
        self.path = str(resolved)
