"""AutoCoder answers each comment of a review on the forge, on the comment's own thread,
once the round it went to has been judged (``RunLineComment.addressed``, ``reply``) and its
commits are on the pull request: what the round changed there, or why not. Each comment
is answered once — claimed before the post, marked after it; a post that fails is
released and tried again (the poll, or the next round's end)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from pipelines.models import LineCommentAddressed, PipelineRun, PullRequest, RunLineComment, RunStatus
from repos.forges import ForgeClient, ForgeError
from repos.forges.reviews import ReplyTarget, reply_post

logger = logging.getLogger(__name__)

CLAIM_SECONDS = 600
CHANGED = "AutoCoder changed these lines in {commit}."
EXPLAINED = "AutoCoder left these lines as they are. The Coder says: {reply}"
UNCHANGED = "AutoCoder's round did not change these lines ({commit})."
CODER_SAYS = "The Coder says: {reply}"


def reply_text(comment: RunLineComment) -> str:
    """What the round did about ``comment``, in a sentence or two."""
    commit = comment.judged_at_commit[:12]
    if comment.addressed == LineCommentAddressed.CHANGED:
        text = CHANGED.format(commit=commit)
        return f"{text} {CODER_SAYS.format(reply=comment.reply)}" if comment.reply else text
    if comment.addressed == LineCommentAddressed.EXPLAINED:
        return EXPLAINED.format(reply=comment.reply)
    return UNCHANGED.format(commit=commit)


def forge_replies_post(*, pull_request: PullRequest, client: ForgeClient) -> int:
    """Answer the forge's comments a round judged, when the pull request has the run's
    head (the round's commits are pushed). Returns how many were answered. ForgeError
    when the forge fails (the comment stays to answer)."""
    run = PipelineRun.objects.get(pk=pull_request.run_id)
    pushed = PullRequest.objects.filter(pk=pull_request.pk).values_list("pushed_head", flat=True).first()
    if run.status != RunStatus.AWAITING_APPROVAL or not run.head_commit or pushed != run.head_commit:
        return 0
    due = (
        RunLineComment.objects.filter(run=run, forge_replied_at__isnull=True)
        .exclude(forge_comment_id="")
        .exclude(addressed="")
    )
    answered = 0
    for comment in due:
        now = timezone.now()
        claimed = (
            RunLineComment.objects.filter(pk=comment.pk, forge_replied_at__isnull=True)
            .filter(
                Q(forge_reply_claimed_at__isnull=True)
                | Q(forge_reply_claimed_at__lt=now - timedelta(seconds=CLAIM_SECONDS))
            )
            .update(forge_reply_claimed_at=now)
        )
        if not claimed:
            continue
        target = ReplyTarget(
            thread_id=comment.forge_thread_id or comment.forge_comment_id,
            author=comment.forge_author,
            path=comment.path,
            lines=comment.lines_phrase,
            body=comment.body,
        )
        try:
            reply_post(client, number=pull_request.number, comment=target, body=reply_text(comment))
        except ForgeError:
            RunLineComment.objects.filter(pk=comment.pk).update(forge_reply_claimed_at=None)
            raise
        RunLineComment.objects.filter(pk=comment.pk).update(forge_replied_at=timezone.now())
        answered += 1
    return answered
