"""Comments on lines of a run's diff, a person's here or a forge review's, and what the
Coder's next round did about them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.models import TimeStampedModel

from .forge import ForgeReview
from .runs import PipelineRun


class LineCommentAddressed(models.TextChoices):
    """What the Coder's round did about a line comment it was sent, judged from git
    (pipelines/review/selectors.py ``line_comments_verdicts``), never assumed."""

    CHANGED = "changed", "Changed"
    # Its lines were left as they were, and the Coder said why.
    EXPLAINED = "explained", "Not changed, explained"
    UNCHANGED = "unchanged", "Not changed"


class LineSide(models.TextChoices):
    """Which side of the diff a line comment's lines are on."""

    # The new file's lines (added and context lines), at the run's head commit.
    NEW = "new", "New file"
    # Lines the change removed, numbered as the old file (the base) had them.
    OLD = "old", "Removed lines"


class RunLineComment(TimeStampedModel):
    """A person's comment on lines of a run's diff, collected while the run awaits
    approval and sent to the Coder with the next request for changes.

    Lines are the new file's (as the diff numbers them), or with ``side`` "old" lines
    the change removed, numbered as the old file had them; ``quote`` keeps the code as
    it read when the comment was written: the Coder's next round rewrites the file, and
    the review history must still show what the comment was about.

    Once the Coder's round has committed, ``addressed`` says whether it changed those
    lines, comparing the file at ``made_on_commit`` with the round's head
    (``judged_at_commit``); ``reply`` is what the Coder said about the comment.
    """

    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="line_comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    path = models.CharField(max_length=1000)
    line_start = models.PositiveIntegerField()
    line_end = models.PositiveIntegerField()
    side = models.CharField(
        max_length=3,
        choices=LineSide.choices,
        default=LineSide.NEW,
        help_text="new: lines of the new file; old: removed lines, numbered as in the old file.",
    )
    quote = models.TextField(blank=True, help_text="The commented lines as they read when the comment was written.")
    body = models.TextField()
    # Which request for changes carried it to the Coder (1 for the run's first, …);
    # null while pending: only pending comments can be edited or deleted.
    feedback_round = models.PositiveSmallIntegerField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    made_on_commit = models.CharField(
        max_length=64, blank=True, help_text="The run's head commit whose lines the comment numbers."
    )
    # Blank until a Coder's round that was sent the comment has committed.
    addressed = models.CharField(max_length=16, choices=LineCommentAddressed.choices, blank=True)
    reply = models.TextField(blank=True, help_text="What the Coder said about the comment.")
    judged_at_commit = models.CharField(
        max_length=64, blank=True, help_text="The round's head commit ``addressed`` was judged at."
    )
    # A comment of a review on the run's pull request (pipelines.pull_requests.reviews):
    # the forge's comment, the thread AutoCoder answers in, and when it answered there.
    forge_review = models.ForeignKey(
        ForgeReview, null=True, blank=True, on_delete=models.SET_NULL, related_name="line_comments"
    )
    forge_comment_id = models.CharField(max_length=64, blank=True, help_text="The forge's id of the comment.")
    forge_thread_id = models.CharField(
        max_length=64, blank=True, help_text="Where a reply goes: GitLab's discussion id; else the comment's id."
    )
    forge_author = models.CharField(max_length=255, blank=True, help_text="The commenter's login on the forge.")
    # A reply being posted (claimed) and posted: each comment is answered once.
    forge_reply_claimed_at = models.DateTimeField(null=True, blank=True)
    forge_replied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["path", "line_start", "line_end", "created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(line_start__gte=1, line_end__gte=models.F("line_start")),
                name="pipelines_line_comment_lines_ordered",
            ),
            models.UniqueConstraint(
                fields=["run", "forge_comment_id"],
                condition=~Q(forge_comment_id=""),
                name="pipelines_line_comment_forge_comment_once",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.path}:{self.lines_label} on run {self.run_id}"

    @property
    def lines_label(self) -> str:
        return str(self.line_start) if self.line_start == self.line_end else f"{self.line_start}–{self.line_end}"

    @property
    def lines_phrase(self) -> str:
        """'line 7' or 'lines 7–9' (removed ones: 'removed lines 7–9'), as a sentence names them."""
        phrase = f"line{'' if self.line_start == self.line_end else 's'} {self.lines_label}"
        return f"removed {phrase}" if self.side == LineSide.OLD else phrase
