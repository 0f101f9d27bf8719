from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from core.models import TimeStampedModel

from .forges import ForgeKind

FOLDER_OUTSIDE_ROOT = "Give a folder inside REPOS_ROOT (relative to it, or absolute)."


class ForgeTrust(models.TextChoices):
    """Whose comments on a pull request may send its run back to the Coder: a comment is
    untrusted input to an agent, so only people the forge gives write access, or a list."""

    COLLABORATORS = "collaborators", "People with write access on the forge"
    LIST = "list", "Only the logins listed"


class MergeStrategy(models.TextChoices):
    MERGE = "merge", "Merge commit"
    FF_ONLY = "ff_only", "Fast-forward only"


class BaseUpdate(models.TextChoices):
    """How a run's branch takes in a base branch that moved on (repos/services/base_update.py)."""

    MERGE = "merge", "Merge the base into the branch"
    REBASE = "rebase", "Rebase the branch onto the base"


BASE_UPDATE_HELP = (
    "How a run's branch takes in a base branch that moved on: merge it in (nothing is rewritten), or rebase the "
    "branch onto it. A rebase rewrites the branch, so it is done only while the branch was never pushed: "
    "AutoCoder never force-pushes unasked, and refuses a rebase of a pushed branch."
)


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
    # The environment (repos/environments/): a setup script written here (else the one
    # the repository carries), run once per key with network; a container image whose
    # root filesystem setup and tests run on instead of the server's /usr.
    setup_script = models.TextField(
        blank=True, help_text="Shell commands that prepare a checkout (install dependencies), run with network."
    )
    base_image = models.CharField(
        max_length=500,
        blank=True,
        help_text="A container image whose root filesystem setup and tests run on, e.g. python:3.12-slim.",
    )
    tests_network = models.BooleanField(default=False, help_text="Let the test command reach the network too.")
    # What the server cannot give this repository's runs (LFS without git-lfs, …),
    # found when it was linked: said on its page before any run fails on it.
    link_warnings = models.JSONField(default=list, blank=True)
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
    # Reviews on the forge (pipelines.pull_requests.reviews): whose become a Coder round.
    forge_trusted_commenters = models.CharField(
        max_length=16,
        choices=ForgeTrust.choices,
        blank=True,
        help_text="Whose reviews on the forge become a round; empty: the server's FORGE_TRUSTED_COMMENTERS.",
    )
    forge_trusted_logins = models.TextField(
        blank=True, help_text="With “list”: the forge logins trusted, comma-separated."
    )
    # Forge issues become tasks (pipelines.forge_issues): those with this label, or assigned to
    # the token's own account (its login learned from the forge once per token).
    forge_issue_label = models.CharField(
        max_length=100, blank=True, help_text="Issues with this label become tasks; empty: none by label."
    )
    forge_issue_assigned = models.BooleanField(
        default=False, help_text="Issues assigned to the access token's account become tasks."
    )
    forge_login = models.CharField(max_length=255, blank=True, editable=False)
    # The poll's place: the forge's own updated_at of the newest issue seen (its clock, not ours).
    forge_issues_since = models.CharField(max_length=64, blank=True, editable=False)
    forge_issues_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    forge_issues_error = models.TextField(blank=True, editable=False)
    # CI on the pull request (pipelines.pull_requests.checks): which checks must pass
    # (empty: all), how many rounds the Coder gets to make failing ones pass, and whether
    # a pull request a person approved is merged on the forge once they pass.
    ci_required_checks = models.JSONField(
        default=list, blank=True, help_text="Names of the checks that must pass; empty: every check."
    )
    ci_fix_rounds_max = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Rounds the Coder gets to fix failing checks; empty: the server's default."
    )
    merge_when_green = models.BooleanField(
        default=False,
        help_text="Merge a pull request on the forge once its checks pass, when a person asked for it on the run.",
    )
    base_update = models.CharField(
        max_length=8, choices=BaseUpdate.choices, default=BaseUpdate.MERGE, help_text=BASE_UPDATE_HELP
    )

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
    def forge_trust(self) -> str:
        """The trust in force: the repository's, else the server's default."""
        return self.forge_trusted_commenters or settings.FORGE_TRUSTED_COMMENTERS

    @property
    def forge_trusted_login_set(self) -> frozenset[str]:
        """The listed logins, compared without case (the forges' logins are not case-sensitive)."""
        return frozenset(login.strip().lower() for login in self.forge_trusted_logins.split(",") if login.strip())

    @property
    def forge_issues_wanted(self) -> bool:
        return self.forge_configured and bool(self.forge_issue_label or self.forge_issue_assigned)

    @property
    def ci_fix_rounds_limit(self) -> int:
        return settings.CI_FIX_ROUNDS_MAX if self.ci_fix_rounds_max is None else self.ci_fix_rounds_max

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


# --- Environments (repos/environments/): what a repository's commands run in ----------


class PreparedEnvironmentStatus(models.TextChoices):
    PREPARING = "preparing", "Preparing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class PreparedEnvironment(TimeStampedModel):
    """What a repository's setup script produced for one key (the script, the base
    image and the manifests and lockfiles it read): kept once, restored into every run's
    worktree whose key is the same. Its files live under ENVIRONMENTS_ROOT."""

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="prepared_environments")
    key = models.CharField(max_length=64, help_text="SHA-256 of the setup script, base image and key files.")
    status = models.CharField(
        max_length=16, choices=PreparedEnvironmentStatus.choices, default=PreparedEnvironmentStatus.PREPARING
    )
    source = models.CharField(max_length=64, blank=True, help_text="Which setup script was in force.")
    setup_script = models.TextField(blank=True, help_text="The script as it ran.")
    base_commit = models.CharField(max_length=64, blank=True, help_text="The commit it was prepared at.")
    key_files = models.JSONField(default=list, blank=True, help_text="The key files read: [path, sha256].")
    image = models.CharField(max_length=500, blank=True, help_text="The base image and its digest, if any.")
    exit_code = models.IntegerField(null=True, blank=True)
    timed_out = models.BooleanField(default=False)
    output = models.TextField(blank=True, help_text="The end of setup's output (secrets masked).")
    duration_ms = models.PositiveIntegerField(default=0)
    size_bytes = models.PositiveBigIntegerField(default=0)
    paths = models.JSONField(default=list, blank=True, help_text="What setup produced, as kept (relative paths).")
    error = models.TextField(blank=True)
    holder = models.CharField(max_length=64, blank=True, help_text="Who is preparing it (a lease token).")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = [models.UniqueConstraint(fields=("repository", "key"), name="prepared_environment_unique_key")]

    def __str__(self) -> str:
        return f"{self.repository} environment {self.key[:12]} ({self.status})"

    @property
    def duration_seconds(self) -> str:
        return f"{self.duration_ms / 1000:.1f}"


class BaseTestResult(TimeStampedModel):
    """The test command's outcome on a base commit in an environment: a run compares its
    own failures with these, so that tests already failing are never billed to it."""

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="base_test_results")
    base_commit = models.CharField(max_length=64)
    environment_key = models.CharField(max_length=64, blank=True)
    test_command = models.CharField(max_length=1000)
    exit_code = models.IntegerField(null=True, blank=True)
    passed = models.BooleanField(default=False)
    timed_out = models.BooleanField(default=False)
    failing_tests = models.JSONField(default=list, blank=True, help_text="Test ids the output names as failing.")
    output = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("-created_at",)
        constraints = [
            models.UniqueConstraint(
                fields=("repository", "base_commit", "environment_key", "test_command"), name="base_test_result_unique"
            )
        ]


class ProjectVariable(TimeStampedModel):
    """An environment variable a project's setup and test commands get: a secret is
    encrypted like API keys (core.crypto), never shown again, never given to a model and
    masked in every log, event and page."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="variables")
    name = models.CharField(max_length=128)
    value_encrypted = models.TextField(editable=False)
    secret = models.BooleanField(default=True)

    class Meta:
        ordering = ("name",)
        constraints = [models.UniqueConstraint(fields=("project", "name"), name="project_variable_unique_name")]

    def __str__(self) -> str:
        return self.name
