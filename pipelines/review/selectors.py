"""Reads of a run under review: its diff and patch, and the line comments a person
leaves on the diff (pending until a request for changes sends them to the Coder)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from core.selectors import one_or_not_found
from pipelines.models import PipelineRun, RunLineComment, RunStatus, RunTransition
from pipelines.review.diff import ChangeSetDiff, diff_changes, diff_file_versions

LINE_COMMENT_NOT_FOUND = "Line comment not found."
# The Coder's lesson from a request for changes reads this many comments besides it.
LESSON_LINE_COMMENTS_MAX = 5


def run_diff(*, run: PipelineRun) -> ChangeSetDiff:
    """The run's changes: the real diff of its branch against where the branch started
    on a linked repository; otherwise the Coder's files against nothing (new files)."""
    from pipelines.runs.workspace import workspace_changed_files

    if run.branch:
        files = workspace_changed_files(run)
        if files is not None:
            return diff_file_versions(files)
    return diff_changes(run.file_changes)


def run_patch(*, run: PipelineRun) -> str:
    """The branch's commits as ``git format-patch`` text ('' when there is no branch)."""
    from pipelines.runs.workspace import run_repository
    from repos.services import branch_format_patch

    repository = run_repository(run)
    if repository is None or not run.branch or run.branch_discarded_at:
        return ""
    return branch_format_patch(repository=repository, base=run.base_commit, branch=run.branch)


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
