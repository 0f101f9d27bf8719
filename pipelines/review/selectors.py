"""Reads of a run under review: its diff and patch, and the line comments a person
leaves on the diff (pending until a request for changes sends them to the Coder), and
what the Coder's round did about them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.db.models import QuerySet

from core.exceptions import ApplicationError
from core.selectors import one_or_not_found
from pipelines.models import LineCommentAddressed, LineSide, PipelineRun, RunLineComment, RunStatus, RunTransition
from pipelines.review.diff import ChangeSetDiff, diff_changes, diff_file_versions

if TYPE_CHECKING:
    from repos.services.branches import FileLineChanges

logger = logging.getLogger(__name__)

LINE_COMMENT_NOT_FOUND = "Line comment not found."
# A diff made from the branch is kept in the cache per commit (run_diff): the panel's
# refreshes and the line comments' checks read it again without git or Pygments.
RUN_DIFF_KEPT_SECONDS = 24 * 60 * 60
# Raised whenever what a kept diff holds changes (pipelines.review.diff's classes, how
# they are made, what branch_changed_files reads): diffs kept before are then not read.
RUN_DIFF_KEPT_VERSION = 2  # 2: removed rows carry their text (comments on removed lines)
# The Coder's lesson from a request for changes reads this many comments besides it.
LESSON_LINE_COMMENTS_MAX = 5


def run_diff(*, run: PipelineRun) -> ChangeSetDiff:
    """The run's changes: the real diff of its branch, at its head commit, against where
    the branch started; otherwise (no branch, or it was discarded) the Coder's files
    against nothing (new files).

    The branch's diff is made once per head commit and kept in the cache: a commit's
    diff never changes, a new round of changes is a new head commit (so a new key), and
    a diff no longer kept (evicted, expired, another process's locmem) is made again."""
    from pipelines.runs.workspace import workspace_changed_files

    if run.branch:
        key = _kept_diff_key(run)
        kept = _kept_diff(key) if key else None
        if kept is not None:
            return kept
        files = workspace_changed_files(run, at=run.head_commit)
        if files is not None:
            diff = diff_file_versions(files)
            if key:
                _keep_diff(key, diff)
            return diff
    return diff_changes(run.file_changes)


def _kept_diff_key(run: PipelineRun) -> str:
    """Where the diff of the run's branch at its head commit is kept ('' when it is not:
    no head commit recorded, the branch discarded, no repository)."""
    from pipelines.runs.workspace import run_repository

    if not run.head_commit or run.branch_discarded_at:
        return ""
    repository = run_repository(run)
    if repository is None:
        return ""
    return f"pipelines:run-diff:{RUN_DIFF_KEPT_VERSION}:{run.pk}:{repository.pk}:{run.base_commit}:{run.head_commit}"


def _kept_diff(key: str) -> ChangeSetDiff | None:
    try:
        kept = cache.get(key)
    except Exception:  # The cache only saves work (Redis down, an entry that no longer loads).
        logger.warning("The kept diff %s could not be read; making it again.", key, exc_info=True)
        return None
    return kept if isinstance(kept, ChangeSetDiff) else None


def _keep_diff(key: str, diff: ChangeSetDiff) -> None:
    try:
        cache.set(key, diff, RUN_DIFF_KEPT_SECONDS)
    except Exception:  # The cache only saves work: the diff is made again next time.
        logger.warning("The diff %s could not be kept.", key, exc_info=True)


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
    lesson read them: ``{"id", "path", "side", "lines" ("line 7", "lines 7–9", "removed
    lines 7–9 of the old file"), "line_start", "line_end", "quote", "body"}`` (the Coder
    replies to a comment by its id)."""
    feedback_round = run_feedback_round(run=run)
    if not feedback_round:
        return []
    return [
        {
            "id": comment.pk,
            "path": comment.path,
            "side": comment.side,
            "lines": comment.lines_phrase + (" of the old file" if comment.side == LineSide.OLD else ""),
            "line_start": comment.line_start,
            "line_end": comment.line_end,
            "quote": comment.quote,
            "body": comment.body,
        }
        for comment in line_comments_for_run(run=run).filter(feedback_round=feedback_round)
    ]


@dataclass(frozen=True)
class LineCommentVerdict:
    """What a Coder's round did about one line comment (RunLineComment's fields)."""

    comment_id: int
    addressed: LineCommentAddressed
    reply: str
    judged_at_commit: str


def line_comments_verdicts(*, run: PipelineRun, head: str, replies: Mapping[int, str]) -> list[LineCommentVerdict]:
    """What the Coder's round that committed ``head`` did about the comments the latest
    request for changes sent: changed, when ``head`` changed the commented lines of the
    file as it was at the comment's commit (edited, removed, the file removed or moved
    away); otherwise explained, when the Coder said why (``replies`` by comment id, or
    what it said in an earlier round); otherwise unchanged. Cumulative: a fix round after
    the request for changes is judged from the comment's commit again.

    A comment on removed lines (``side`` old) is about what the change did to the old
    file's lines: changed, when the removal as ``head`` makes it — the old file's hunks
    over those lines, against the base, and what stands in their place — differs from
    the removal the comment was made on (the lines put back, replaced otherwise, the
    removal widened); the same removal is left as it was.

    Git reads the repository: slow I/O, to be called outside a transaction. A comment
    whose commit was never recorded, or whose file git could not compare, gets no
    verdict: it is left unjudged rather than guessed."""
    feedback_round = run_feedback_round(run=run)
    if not feedback_round or not head:
        return []
    compared: dict[tuple[str, str, str], FileLineChanges | None] = {}

    def changes_of(old: str, new: str, path: str) -> FileLineChanges | None:
        if (old, new, path) not in compared:
            compared[(old, new, path)] = _line_changes(run, old=old, new=new, path=path)
        return compared[(old, new, path)]

    verdicts = []
    for comment in line_comments_for_run(run=run).filter(feedback_round=feedback_round):
        if not comment.made_on_commit:
            continue
        if comment.side == LineSide.OLD:
            changed = _removal_changed(run, comment, head, changes_of)
        else:
            changes = changes_of(comment.made_on_commit, head, comment.path)
            changed = None if changes is None else changes.touches(comment.line_start, comment.line_end)
        if changed is None:
            continue
        reply = replies.get(comment.pk, "").strip() or comment.reply
        if changed:
            addressed = LineCommentAddressed.CHANGED
        elif reply:
            addressed = LineCommentAddressed.EXPLAINED
        else:
            addressed = LineCommentAddressed.UNCHANGED
        verdicts.append(
            LineCommentVerdict(comment_id=comment.pk, addressed=addressed, reply=reply, judged_at_commit=head)
        )
    return verdicts


def _removal_changed(
    run: PipelineRun,
    comment: RunLineComment,
    head: str,
    changes_of: Callable[[str, str, str], FileLineChanges | None],
) -> bool | None:
    """Whether ``head`` removes the old file's commented lines otherwise than the commit
    the comment was made on did (both against the run's base); None when git cannot say."""
    if comment.made_on_commit == head:  # The round committed nothing.
        return False
    if not run.base_commit:
        return None
    made = changes_of(run.base_commit, comment.made_on_commit, comment.path)
    now = changes_of(run.base_commit, head, comment.path)
    if made is None or now is None:
        return None
    first, last = comment.line_start, comment.line_end
    return made.over(first, last) != now.over(first, last)


def _line_changes(run: PipelineRun, *, old: str, new: str, path: str) -> FileLineChanges | None:
    """Which lines of ``path`` changed from ``old`` to ``new``; None when git cannot say."""
    from pipelines.runs.workspace import workspace_line_changes
    from repos.services.branches import FileLineChanges

    if old == new:  # The round committed nothing.
        return FileLineChanges()
    try:
        return workspace_line_changes(run, old=old, new=new, path=path)
    except ApplicationError as exc:  # A repository gone or unlinked, git failing.
        logger.warning("Run %s: %s at %s..%s left its line comments unjudged: %s", run.pk, path, old, new, exc.message)
        return None


def line_comment_lesson_texts(comments: list[dict[str, Any]]) -> list[str]:
    """What a lesson learns from the comments besides the general feedback: their words
    and the file they were about, not the code (it is about this change only)."""
    return [f"{comment['body']} (on {comment['path']})" for comment in comments[:LESSON_LINE_COMMENTS_MAX]]
