"""Line comments on a run's diff: a person comments on lines of a file while the run
awaits approval; the comments collect on the run (pending: editable, deletable) until
the request for changes, which sends them to the Coder with the general feedback and
stamps them with the round of feedback that carried them.

Lines are the new file's, as the diff numbers them, and only lines the diff shows (the
changed hunks with their context) can be commented on: they are the lines the person
read. The code on those lines is kept with the comment (``quote``), so the Coder and the
review history see what it was about after the next round rewrote the file.

Reads and writes of one small subdomain together, as queue.py and lessons.py are:
views, the API, the panel and the orchestrator call these; the request for changes
itself stays pipelines.services.run_request_changes, called from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.exceptions import Conflict
from core.selectors import one_or_not_found

from .models import PipelineRun, RunLineComment, RunStatus, RunTransition
from .selectors import run_diff
from .services import run_request_changes

if TYPE_CHECKING:
    from accounts.models import User

LINE_COMMENT_BODY_MAX_LENGTH = 5_000
# A comment is about a few lines; a longer range is a comment on the whole change.
LINE_COMMENT_MAX_LINES = 200
# Pending comments a run may collect: each goes into the Coder's prompt whole.
PENDING_LINE_COMMENTS_MAX = 100
# The Coder's lesson from a request for changes reads this many comments besides it.
LESSON_LINE_COMMENTS_MAX = 5

LINE_COMMENT_NOT_FOUND = "Line comment not found."
BODY_REQUIRED = "Write the comment."
BODY_TOO_LONG = f"Keep the comment under {LINE_COMMENT_BODY_MAX_LENGTH:,} characters."
PATH_NOT_IN_DIFF = "This file is not among the run's changes."
LINE_NOT_IN_DIFF = "Line {line} of {path} is not in the diff: comment on lines of its changed hunks."
LINES_REVERSED = "The range must end at or after its first line."
TOO_MANY_LINES = f"Comment on at most {LINE_COMMENT_MAX_LINES} lines at once."
NOT_AWAITING_APPROVAL = "Lines can be commented on only while the run awaits your approval."
ALREADY_SENT = "This comment was sent to the Coder with a request for changes; it can no longer change."
TOO_MANY_PENDING = f"A run collects at most {PENDING_LINE_COMMENTS_MAX} comments: send them with a request for changes."


class LineCommentClosed(Conflict):
    """The comment (or its run) is past the point where it can change."""

    code = "line_comment_closed"


# --- Reads --------------------------------------------------------------------------------


def line_comments_for_run(*, run: PipelineRun) -> QuerySet[RunLineComment]:
    """The run's comments, pending and sent, by file and line."""
    return RunLineComment.objects.filter(run=run).select_related("author")


def line_comments_pending(*, run: PipelineRun) -> list[RunLineComment]:
    return list(line_comments_for_run(run=run).filter(feedback_round__isnull=True))


def line_comment_get_for_run(*, run: PipelineRun, comment_id: object) -> RunLineComment:
    """A comment of ``run`` (a run the caller already got for its user), or NotFound."""
    return one_or_not_found(line_comments_for_run(run=run), comment_id, LINE_COMMENT_NOT_FOUND)


def run_feedback_round(*, run: PipelineRun) -> int:
    """How many times changes were requested on the run: the round of feedback the Coder
    is on (0: none yet). Counted from the audit rows, the one record of every request."""
    return RunTransition.objects.filter(
        run=run, from_status=RunStatus.AWAITING_APPROVAL, to_status=RunStatus.CODING
    ).count()


def line_comments_for_coder(*, run: PipelineRun) -> list[dict[str, Any]]:
    """The comments the latest request for changes sent, as the Coder's prompt and the
    lesson read them: ``{"path", "lines" ("line 7", "lines 7–9"), "quote", "body"}``."""
    feedback_round = run_feedback_round(run=run)
    if not feedback_round:
        return []
    return [
        {"path": comment.path, "lines": comment.lines_phrase, "quote": comment.quote, "body": comment.body}
        for comment in line_comments_for_run(run=run).filter(feedback_round=feedback_round)
    ]


def line_comment_lesson_texts(comments: list[dict[str, Any]]) -> list[str]:
    """What a lesson learns from the comments besides the general feedback: their words
    and the file they were about, not the code (it is about this change only)."""
    return [f"{comment['body']} (on {comment['path']})" for comment in comments[:LESSON_LINE_COMMENTS_MAX]]


# --- Writes -------------------------------------------------------------------------------


def _clean_body(body: str) -> str:
    body = body.strip()
    if not body:
        raise ValidationError({"body": [BODY_REQUIRED]})
    if len(body) > LINE_COMMENT_BODY_MAX_LENGTH:
        raise ValidationError({"body": [BODY_TOO_LONG]})
    return body


def _quoted_lines(run: PipelineRun, path: str, line_start: int, line_end: int) -> str:
    """The new file's lines ``line_start``–``line_end`` as the diff shows them; a
    ValidationError naming the field at fault when they are not all there."""
    if line_end < line_start:
        raise ValidationError({"line_end": [LINES_REVERSED]})
    if line_end - line_start + 1 > LINE_COMMENT_MAX_LINES:
        raise ValidationError({"line_end": [TOO_MANY_LINES]})
    files = {file.path: file for file in run_diff(run=run).files}
    if path not in files:
        raise ValidationError({"path": [PATH_NOT_IN_DIFF]})
    shown = files[path].new_lines_shown()
    for line in range(line_start, line_end + 1):
        if line not in shown:
            field = "line_start" if line == line_start else "line_end"
            raise ValidationError({field: [LINE_NOT_IN_DIFF.format(line=line, path=path)]})
    return "\n".join(shown[line] for line in range(line_start, line_end + 1))


def _lock_awaiting(run: PipelineRun) -> None:
    """Hold the run's row and check it still awaits approval: a request for changes
    (which takes the same row) cannot slip between the check and the write, so no
    comment is left pending on a run that already went back to the Coder."""
    status = PipelineRun.objects.select_for_update().filter(pk=run.pk).values_list("status", flat=True).first()
    if status != RunStatus.AWAITING_APPROVAL:
        raise LineCommentClosed(NOT_AWAITING_APPROVAL)


def line_comment_create(
    *, run: PipelineRun, author: User | None, path: str, line_start: int, line_end: int | None = None, body: str
) -> RunLineComment:
    """A pending comment on lines ``line_start``–``line_end`` (one line when None) of the
    new ``path`` in the run's diff, with those lines quoted. ValidationError (by field)
    for bad input, LineCommentClosed unless the run awaits approval."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise LineCommentClosed(NOT_AWAITING_APPROVAL)
    body = _clean_body(body)
    line_end = line_start if line_end is None else line_end
    # The diff reads git on a linked repository: slow I/O, outside the transaction.
    quote = _quoted_lines(run, path, line_start, line_end)
    with transaction.atomic():
        _lock_awaiting(run)
        if RunLineComment.objects.filter(run=run, feedback_round__isnull=True).count() >= PENDING_LINE_COMMENTS_MAX:
            raise LineCommentClosed(TOO_MANY_PENDING)
        return RunLineComment.objects.create(
            run=run, author=author, path=path, line_start=line_start, line_end=line_end, quote=quote, body=body
        )


def line_comment_update(*, comment: RunLineComment, body: str) -> RunLineComment:
    """A pending comment's new text."""
    body = _clean_body(body)
    with transaction.atomic():
        _lock_awaiting(comment.run)
        updated = RunLineComment.objects.filter(pk=comment.pk, feedback_round__isnull=True).update(
            body=body, updated_at=timezone.now()
        )
        if not updated:
            raise LineCommentClosed(ALREADY_SENT)
    comment.body = body
    return comment


def line_comment_delete(*, comment: RunLineComment) -> None:
    """Take back a pending comment."""
    with transaction.atomic():
        _lock_awaiting(comment.run)
        deleted, _ = RunLineComment.objects.filter(pk=comment.pk, feedback_round__isnull=True).delete()
        if not deleted:
            raise LineCommentClosed(ALREADY_SENT)


def run_request_changes_with_line_comments(
    *, run: PipelineRun, feedback: str, actor: User | None = None
) -> PipelineRun:
    """The request for changes (pipelines.services.run_request_changes) and the run's
    pending line comments sent with it, in one transaction: they are stamped with the
    round of feedback it opens, or, should the request fail, stay pending."""
    with transaction.atomic():
        run = run_request_changes(run=run, feedback=feedback, actor=actor)
        # After the transition holds the run's row: a comment written before it is
        # included, one written after it is refused (_lock_awaiting).
        RunLineComment.objects.filter(run=run, feedback_round__isnull=True).update(
            feedback_round=run_feedback_round(run=run), sent_at=timezone.now()
        )
    return run
