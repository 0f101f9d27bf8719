"""What a person does with a run that awaits approval: comment on lines of its diff,
request changes (the comments go with them), approve it — merged here or on the forge.

Line comments collect on the run (pending: editable, deletable) until the request for
changes, which sends them to the Coder with the general feedback and stamps them with
the round of feedback that carried them. A request for changes may be the comments
alone. Lines are the new file's, as the diff numbers them, and only lines the diff shows
(the changed hunks with their context) can be commented on: they are the lines the
person read; or, on the old side, lines the change removed, numbered as the old file
had them. The code on those lines is kept with
the comment (``quote``), so the Coder and the review history see what it was about
after the next round rewrote the file, and so is the commit they were read at, so that
the round can be checked against it: whether it changed those lines, or the Coder said
why not (``line_comments_record_verdicts``).

Each action has one door here, called by the page, the API, the forge's webhook and
poll alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.exceptions import Conflict, InvalidTransition
from core.jobs import enqueue_on_commit
from pipelines.learning.lessons import lessons_on_approval
from pipelines.models import (
    RUN_TRANSITIONS,
    FeedbackOrigin,
    ForgeIssue,
    ForgeIssueState,
    LineSide,
    PipelineRun,
    RunLineComment,
    RunStatus,
)
from pipelines.review.selectors import LineCommentVerdict, run_diff, run_feedback_round
from pipelines.runs.services import run_transition

if TYPE_CHECKING:
    from accounts.models import User

FEEDBACK_REQUIRED = "Say what should change, here or in comments on lines of the diff."
MERGE_REFUSED = (
    "The branch {branch} was not merged into {base}: {reason} The branch and its worktree are kept; "
    "download the patch, resolve it in the repository, or request changes."
)
LINE_COMMENT_BODY_MAX_LENGTH = 5_000
# A comment is about a few lines; a longer range is a comment on the whole change.
LINE_COMMENT_MAX_LINES = 200
# Pending comments a run may collect: each goes into the Coder's prompt whole.
PENDING_LINE_COMMENTS_MAX = 100
BODY_REQUIRED = "Write the comment."
BODY_TOO_LONG = f"Keep the comment under {LINE_COMMENT_BODY_MAX_LENGTH:,} characters."
PATH_NOT_IN_DIFF = "This file is not among the run's changes."
LINE_NOT_IN_DIFF = "Line {line} of {path} is not in the diff: comment on lines of its changed hunks."
LINE_NOT_REMOVED = "Line {line} of the old {path} was not removed: comment on the lines the change removed."
SIDE_UNKNOWN = "Comment on the new file's lines (new) or on removed lines (old)."
LINES_REVERSED = "The range must end at or after its first line."
TOO_MANY_LINES = f"Comment on at most {LINE_COMMENT_MAX_LINES} lines at once."
NOT_AWAITING_APPROVAL = "Lines can be commented on only while the run awaits your approval."
ALREADY_SENT = "This comment was sent to the Coder with a request for changes; it can no longer change."
TOO_MANY_PENDING = f"A run collects at most {PENDING_LINE_COMMENTS_MAX} comments: send them with a request for changes."


class LineCommentClosed(Conflict):
    """The comment (or its run) is past the point where it can change."""

    code = "line_comment_closed"


class MergeRefused(Conflict):
    code = "merge_refused"


class BaseMoved(Conflict):
    """Nothing approved: the base moved on and was merged into the branch first, which is
    tested (a clean merge) or resolved by the Coder (conflicts) before approval."""

    code = "base_moved"


@dataclass(frozen=True)
class MergedOnForge:
    """How a run was approved when its pull request was merged on the forge (its
    webhook or the poll said so): nothing to merge here."""

    number: int
    url: str

    def merge_result(self) -> dict[str, Any]:
        return {"merged": True, "via": "pull_request", "url": self.url, "message": "Merged on the forge."}


def _clean_body(body: str) -> str:
    body = body.strip()
    if not body:
        raise ValidationError({"body": [BODY_REQUIRED]})
    if len(body) > LINE_COMMENT_BODY_MAX_LENGTH:
        raise ValidationError({"body": [BODY_TOO_LONG]})
    return body


def _quoted_lines(run: PipelineRun, path: str, line_start: int, line_end: int, side: str) -> str:
    """Lines ``line_start``–``line_end`` as the diff shows them: the new file's, or
    (``side`` old) the old file's lines the change removed; a ValidationError naming the
    field at fault when they are not all there."""
    if line_end < line_start:
        raise ValidationError({"line_end": [LINES_REVERSED]})
    if line_end - line_start + 1 > LINE_COMMENT_MAX_LINES:
        raise ValidationError({"line_end": [TOO_MANY_LINES]})
    files = {file.path: file for file in run_diff(run=run).files}
    if path not in files:
        raise ValidationError({"path": [PATH_NOT_IN_DIFF]})
    old_side = side == LineSide.OLD
    shown = files[path].old_lines_removed() if old_side else files[path].new_lines_shown()
    for line in range(line_start, line_end + 1):
        if line not in shown:
            field = "line_start" if line == line_start else "line_end"
            message = LINE_NOT_REMOVED if old_side else LINE_NOT_IN_DIFF
            raise ValidationError({field: [message.format(line=line, path=path)]})
    return "\n".join(shown[line] for line in range(line_start, line_end + 1))


def _lock_awaiting(run: PipelineRun) -> None:
    """Hold the run's row and check it still awaits approval: a request for changes
    (which takes the same row) cannot slip between the check and the write, so no
    comment is left pending on a run that already went back to the Coder."""
    status = PipelineRun.objects.select_for_update().filter(pk=run.pk).values_list("status", flat=True).first()
    if status != RunStatus.AWAITING_APPROVAL:
        raise LineCommentClosed(NOT_AWAITING_APPROVAL)


def _lock_awaiting_or_invalid(run: PipelineRun) -> None:
    """Hold the run's row; InvalidTransition, as the transition would say, unless it
    still awaits approval."""
    status = PipelineRun.objects.select_for_update().filter(pk=run.pk).values_list("status", flat=True).first()
    if status != RunStatus.AWAITING_APPROVAL:
        raise InvalidTransition(
            f"A run that is {status} cannot become {RunStatus.CODING}.",
            extra={"allowed": [str(s) for s in sorted(RUN_TRANSITIONS[status])] if status else []},
        )


def line_comment_create(
    *,
    run: PipelineRun,
    author: User | None,
    path: str,
    line_start: int,
    line_end: int | None = None,
    body: str,
    side: str = LineSide.NEW,
    forge_fields: Mapping[str, Any] | None = None,
) -> RunLineComment:
    """A pending comment on lines ``line_start``–``line_end`` (one line when None) of the
    new ``path`` in the run's diff — or, ``side`` "old", of the lines the change removed,
    numbered as the old file had them — with those lines quoted. ValidationError (by
    field) for bad input, LineCommentClosed unless the run awaits approval.
    ``forge_fields``: where a comment of a review on the forge came from
    (pipelines.pull_requests.reviews), written with it."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise LineCommentClosed(NOT_AWAITING_APPROVAL)
    if side not in LineSide.values:
        raise ValidationError({"side": [SIDE_UNKNOWN]})
    body = _clean_body(body)
    line_end = line_start if line_end is None else line_end
    # The diff reads git on a linked repository: slow I/O, outside the transaction.
    quote = _quoted_lines(run, path, line_start, line_end, side)
    with transaction.atomic():
        _lock_awaiting(run)
        if RunLineComment.objects.filter(run=run, feedback_round__isnull=True).count() >= PENDING_LINE_COMMENTS_MAX:
            raise LineCommentClosed(TOO_MANY_PENDING)
        return RunLineComment.objects.create(
            run=run,
            author=author,
            path=path,
            line_start=line_start,
            line_end=line_end,
            side=side,
            quote=quote,
            body=body,
            # The lines are numbered as the diff at this commit shows them: the round
            # that answers the comment is compared with it (line_comments_verdicts).
            made_on_commit=run.head_commit,
            **(forge_fields or {}),
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


def run_request_changes(
    *, run: PipelineRun, feedback: str, actor: User | None = None, origin: str = FeedbackOrigin.PERSON
) -> PipelineRun:
    """Awaiting approval → coding again, with the person's feedback for the Coder and
    the run's pending line comments, in one transaction: the comments are stamped with
    the round of feedback it opens, or, should the request fail, stay pending. The
    feedback may be empty when there are pending comments: they are the request. The
    review loop starts afresh (up to three reviews again). ``origin`` (FeedbackOrigin) says
    who asked when it was not a person here: the run's pull request on the forge
    (pipelines.pull_requests.rounds) — the Coder is told so, and only people teach lessons."""
    feedback = feedback.strip()
    with transaction.atomic():
        if not feedback:
            # Under the run's row, which a comment's delete takes too: the comments
            # counted here are the ones the request sends.
            _lock_awaiting_or_invalid(run)
            if not RunLineComment.objects.filter(run=run, feedback_round__isnull=True).exists():
                raise ValidationError({"feedback": [FEEDBACK_REQUIRED]})
        run = run_transition(
            run=run,
            to_status=RunStatus.CODING,
            reason="changes requested"
            if origin == FeedbackOrigin.PERSON
            else f"changes requested by {FeedbackOrigin(origin).label}",
            actor=actor,
            fields={"feedback_origin": origin, "feedback": feedback, "iteration": 0, "review_findings": []},
        )
        # After the transition holds the run's row: a comment written before it is
        # included, one written after it is refused (_lock_awaiting).
        pending = RunLineComment.objects.filter(run=run, feedback_round__isnull=True)
        # A comment written before its commit was kept with it: the head has not moved
        # while the run awaited approval, so it is the commit the comment was made on.
        pending.filter(made_on_commit="").update(made_on_commit=run.head_commit)
        pending.update(feedback_round=run_feedback_round(run=run), sent_at=timezone.now())
    return run


def line_comments_record_verdicts(*, verdicts: Iterable[LineCommentVerdict]) -> None:
    """Keep on each comment what the Coder's round did about it (its head commit
    ``LineCommentVerdict.judged_at_commit``). Called in the transaction that ends the
    round, so a round whose worker lost its lease leaves no verdict; the round redone
    after it writes its own over an earlier one."""
    for verdict in verdicts:
        RunLineComment.objects.filter(pk=verdict.comment_id).update(
            addressed=verdict.addressed,
            reply=verdict.reply,
            judged_at_commit=verdict.judged_at_commit,
            updated_at=timezone.now(),
        )


def run_approve(*, run: PipelineRun, actor: User | None = None, via: MergedOnForge | None = None) -> PipelineRun:
    """Approve the run. ``via`` None: a person approves it here, and on a linked
    repository its branch is merged into the base branch first — a merge that does not
    apply cleanly approves nothing: the run stays awaiting approval with the conflicts
    recorded, and its branch stays. ``via`` a forge merge: its pull request was merged
    there. Either way the approval teaches: the memories the run was given proved right."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise InvalidTransition(
            f"A run that is {run.status} cannot become {RunStatus.APPROVED}.",
            extra={"allowed": [str(s) for s in sorted(RUN_TRANSITIONS[run.status])]},
        )
    if via is not None:
        reason, fields = f"pull request #{via.number} merged on the forge", {"merge_result": via.merge_result()}
    else:
        _base_first(run)
        reason, fields = "approved", _merge_here(run)
    run = run_transition(run=run, to_status=RunStatus.APPROVED, reason=reason, actor=actor, fields=fields)
    lessons_on_approval(run)
    if via is None:
        _forge_issue_close_later(run)
    return run


def _forge_issue_close_later(run: PipelineRun) -> None:
    """Merged here, a task from a forge's issue closes its issue from here, naming the
    commit (a pull request merged on the forge closes it there: "Closes #N")."""
    commit = str((run.merge_result or {}).get("commit") or "")
    open_issue = ForgeIssue.objects.filter(task_id=run.task_id, state=ForgeIssueState.OPEN)
    if commit and open_issue.update(close_commit=commit):
        enqueue_on_commit("pipelines.tasks.pipeline_close_forge_issue", run.task_id)


def run_base_moved_round(*, run: PipelineRun, feedback: str) -> PipelineRun:
    """The base merged into the run's branch conflicted (found on approval here): the
    Coder resolves the conflicts — a request for changes from the base, like the forge's
    (pipelines.pull_requests.rounds) — and the round is kept with the base update."""
    from pipelines.runs.base_update import run_mark_base_round

    run = run_request_changes(run=run, feedback=feedback, origin=FeedbackOrigin.BASE)
    run_mark_base_round(run=run, round_number=run_feedback_round(run=run))
    return run


def _base_first(run: PipelineRun) -> None:
    """Before merging here: a base that moved on is merged into the branch first, and
    nothing is approved yet (BaseMoved) — a clean merge is tested and reviewed again, a
    conflicted one goes to the Coder. Conflict markers left on the branch refuse the
    approval (MergeRefused)."""
    from pipelines.runs.base_update import (
        CONFLICT_ROUND,
        MARKERS_LEFT,
        RETESTING,
        base_conflict_feedback,
        run_markers_left,
        run_retest_after_base,
        run_take_base,
    )
    from repos.services.base_update import BaseUpdateRefused

    try:
        result = run_take_base(run=run, via="approval")
    except BaseUpdateRefused as refused:
        raise MergeRefused(refused.message) from None
    if result is None:
        left = run_markers_left(run)
        if left:
            raise MergeRefused(MARKERS_LEFT.format(paths=", ".join(left)), extra={"conflicts": left})
        return
    base = run.base_updates[-1]["base_branch"]
    if not result.conflicts:
        run_retest_after_base(run=run, result=result)
        raise BaseMoved(RETESTING.format(base=base, commit=result.base_commit[:10]))
    run_base_moved_round(run=run, feedback=base_conflict_feedback(run=run, result=result, base_branch=base))
    raise BaseMoved(
        CONFLICT_ROUND.format(base=base, commit=result.base_commit[:10], count=len(result.conflicts)),
        extra={"conflicts": result.conflicted_paths},
    )


def _merge_here(run: PipelineRun) -> dict[str, Any]:
    """Merge the run's branch into the base branch of its repository (no branch: nothing
    to merge); the fields the approval records. MergeRefused when it does not apply."""
    if not run.branch:
        return {}
    from pipelines.runs.workspace import run_repository
    from repos.services import branch_merge

    repository = run_repository(run)
    if repository is None:
        raise MergeRefused(
            MERGE_REFUSED.format(branch=run.branch, base="the base branch", reason="the project no longer links it.")
        )
    # Git is slow I/O: the merge runs before, not inside, the transition's transaction.
    result = {**asdict(branch_merge(repository=repository, branch=run.branch)), "base_branch": repository.base_branch}
    PipelineRun.objects.filter(pk=run.pk).update(merge_result=result)
    run.merge_result = result
    if not result["merged"]:
        raise MergeRefused(
            MERGE_REFUSED.format(branch=run.branch, base=repository.base_branch, reason=result["message"]),
            extra={"conflicts": result["conflicts"]},
        )
    return {"merge_result": result}
