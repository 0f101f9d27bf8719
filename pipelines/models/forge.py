"""A run's life on the project's forge: its pull request and the reviews people leave
on it, the webhook deliveries already applied, and the forge's issues that became tasks."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import TimeStampedModel
from repos.forges import ForgeKind, PullRequestState

from .runs import PipelineRun


class PullRequest(TimeStampedModel):
    """A run's pull (merge) request on the project's forge (pipelines.pull_requests.services):
    its number and link there, and the state the forge last reported."""

    run = models.OneToOneField(PipelineRun, on_delete=models.CASCADE, related_name="pull_request")
    forge_kind = models.CharField(max_length=16, choices=ForgeKind.choices)
    number = models.PositiveIntegerField(help_text="The forge's number (GitLab: the merge request's iid).")
    url = models.URLField(max_length=1000)
    state = models.CharField(max_length=16, choices=PullRequestState.choices, default=PullRequestState.OPEN)
    head_branch = models.CharField(max_length=255)
    base_branch = models.CharField(max_length=255)
    pushed_to = models.CharField(max_length=1000, help_text="The remote the branch was pushed to.")
    # The run's head commit the forge's branch has (pipelines.pull_requests.rounds pushes a
    # round's new commits after it); the forge's checks are about this commit.
    pushed_head = models.CharField(max_length=64, blank=True)
    opened_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # Opened on the forge by a person for the run's branch before AutoCoder tried: taken as the run's.
    adopted = models.BooleanField(default=False)
    state_checked_at = models.DateTimeField(null=True, blank=True)
    # The last failure to ask the forge about it (it is asked again at the next poll).
    error = models.TextField(blank=True)
    # Its CI (pipelines.pull_requests.checks): the summary of the checks of ``checks_head``
    # ({"state", "checks": [{"name", "state", "url"}], "message"}), the rounds the Coder was
    # sent back for failing checks, the head the last such round was for (once per head),
    # and a person's wish that it be merged on the forge once they pass.
    checks = models.JSONField(default=dict, blank=True)
    checks_head = models.CharField(max_length=64, blank=True)
    checks_checked_at = models.DateTimeField(null=True, blank=True)
    ci_fix_rounds = models.PositiveIntegerField(default=0)
    ci_round_head = models.CharField(max_length=64, blank=True)
    merge_when_green_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    merge_when_green_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "state_checked_at"])]

    def __str__(self) -> str:
        return f"#{self.number} ({self.state})"


class ForgeDelivery(models.Model):
    """A webhook delivery already applied, known by its body's SHA-256: what the
    signature covers (GitHub, Gitea/Forgejo), so a replay is the same delivery whatever
    delivery id it claims — the forges do not sign the id. ``delivery_id`` is the forge's
    label, kept to find the delivery in the forge's log."""

    repository = models.ForeignKey("repos.Repository", on_delete=models.CASCADE, related_name="+")
    body_sha256 = models.CharField(max_length=64)
    delivery_id = models.CharField(max_length=100, blank=True)
    received_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["repository", "body_sha256"], name="pipelines_forge_delivery_body_once")
        ]

    def __str__(self) -> str:
        return self.delivery_id or self.body_sha256


class ForgeReviewOutcome(models.TextChoices):
    """What became of a review on a run's pull request."""

    # Trusted, waiting for the run to await approval (or for the forge to answer).
    PENDING = "pending", "Waiting for the run"
    ROUND = "round", "Sent to the Coder"
    UNTRUSTED = "untrusted", "Not acted on: not trusted"


class ForgeReview(TimeStampedModel):
    """A review on a run's pull request, as the forge gave it (GitHub's and Gitea's
    review; GitLab's notes of one person found together): recorded once, whether it came
    by webhook or by the poll (``key`` per pull request), then acted on once — a Coder
    round when its author is trusted on the project, else only shown. Its line comments
    become the run's ``RunLineComment`` rows when the round starts; until then they wait
    here (``comments``), bounded, as the forge sent them."""

    pull_request = models.ForeignKey(PullRequest, on_delete=models.CASCADE, related_name="forge_reviews")
    key = models.CharField(max_length=100, help_text="The forge's review id (GitLab: its first note's).")
    # The forge's ids of every comment in it: a comment is never imported twice.
    comment_ids = models.JSONField(default=list, blank=True)
    author = models.CharField(max_length=255)
    author_id = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=32, blank=True, help_text="The forge's word: CHANGES_REQUESTED, COMMENTED …")
    body = models.TextField(blank=True)
    comments = models.JSONField(default=list, blank=True)
    outcome = models.CharField(max_length=16, choices=ForgeReviewOutcome.choices, default=ForgeReviewOutcome.PENDING)
    # A worker acting on it (claimed): another leaves it alone until the claim is old.
    claimed_at = models.DateTimeField(null=True, blank=True)
    feedback_round = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["pull_request", "key"], name="pipelines_forge_review_once"),
        ]

    def __str__(self) -> str:
        return f"review {self.key} by {self.author} ({self.outcome})"


class ForgeIssueState(models.TextChoices):
    OPEN = "open", "Open"
    CLOSED = "closed", "Closed"


class ForgeIssue(TimeStampedModel):
    """An issue on the repository's forge that became a task (pipelines.forge_issues): its
    number and link there, the state and title the forge last reported, and when the forge
    last changed it (an older report is not applied over a newer one)."""

    repository = models.ForeignKey("repos.Repository", on_delete=models.CASCADE, related_name="+")
    forge_kind = models.CharField(max_length=16, choices=ForgeKind.choices)
    number = models.PositiveIntegerField(help_text="The forge's number (GitLab: the issue's iid).")
    url = models.URLField(max_length=1000)
    state = models.CharField(max_length=16, choices=ForgeIssueState.choices, default=ForgeIssueState.OPEN)
    title = models.CharField(max_length=255)
    # Null once a person deleted the task: the issue stays known, so it is not imported again.
    task = models.OneToOneField(
        "tasks.Task", null=True, blank=True, on_delete=models.SET_NULL, related_name="forge_issue"
    )
    forge_updated_at = models.DateTimeField(help_text="The forge's updated_at of the version last applied.")
    body_sha256 = models.CharField(max_length=64, help_text="The issue's body last seen (an edit is told by it).")
    # What the forge changed that was not applied to the task (it had started), for the pages.
    note = models.CharField(max_length=500, blank=True)
    # A run approved by a merge here: the commit to name when AutoCoder closes the issue
    # (cleared once closed; the poll tries again after a failure).
    close_commit = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["repository", "number"], name="pipelines_forge_issue_once")]

    def __str__(self) -> str:
        return f"#{self.number} ({self.state})"

    def summary(self) -> dict[str, str | int]:
        """What the card and the API show (``Task.pipeline_state["forge_issue"]``)."""
        return {
            "number": self.number,
            "url": self.url,
            "state": self.state,
            "forge": self.get_forge_kind_display(),
            "note": self.note,
        }
