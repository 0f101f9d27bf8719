"""Reviews on a run's pull request: a person on the forge asks for changes (or comments on
lines), and the run goes back to the Coder — one review, one round — through the same door
as every request from the forge (``rounds.pull_request_round_start``), its line comments
becoming the run's line comments, its body the feedback.

Whether it came by webhook (``forge_review_delivery``, in ``DELIVERY_HANDLERS``) or by the
poll (``pull_request_reviews_follow``, in ``POLL_FOLLOWERS``), the reviews are read from the
forge's API and recorded once (``ForgeReview``, one per review key, under the pull
request's row lock); AutoCoder's own replies are not reviews (the token's own login). Then
each recorded review is acted on once: its author trusted on the project (the repository's
``forge_trusted_commenters``) → a round when the run awaits approval (until then it waits,
as does the next review while a round runs); not trusted → only shown on the run's page,
never in a prompt. A forge that fails loses nothing: what was recorded waits, what was not
is read again next time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from pipelines.forge_deliveries import Delivery
from pipelines.models import (
    FeedbackOrigin,
    ForgeReview,
    ForgeReviewOutcome,
    PipelineRun,
    PullRequest,
    RunLineComment,
    RunStatus,
)
from pipelines.review.selectors import run_feedback_round
from pipelines.review.services import LineCommentClosed, line_comment_create
from pipelines.runs.services import InvalidTransition
from pipelines.runs.workspace import run_repository
from repos.forges import ForgeClient, ForgeError, ForgeKind, PullRequestState
from repos.forges.reviews import CHANGES_REQUESTED, ReviewInfo, own_login, reviews_list
from repos.services.forge_trust import forge_commenter_trusted

from .review_replies import forge_replies_post
from .rounds import pull_request_round_start
from .services import forge_client_for

logger = logging.getLogger(__name__)

# A worker that claimed a review and died: another takes it after this long.
CLAIM_SECONDS = 600
# The events that say a review or a comment was written (GitHub's and Gitea's event
# header, GitLab's object_kind).
REVIEW_EVENTS: dict[str, frozenset[str]] = {
    ForgeKind.GITHUB: frozenset({"pull_request_review", "pull_request_review_comment"}),
    ForgeKind.GITEA: frozenset(
        {
            "pull_request_review_rejected",
            "pull_request_review_comment",
            "pull_request_review_approved",
            "pull_request_comment",
        }
    ),
    ForgeKind.GITLAB: frozenset({"note"}),
}
NOT_ON_LINES = "Comments not on lines of the current diff:"


def _delivery_number(kind: str, payload: Mapping[str, Any]) -> int | None:
    """Which pull (merge) request a review delivery is about."""
    if kind == ForgeKind.GITLAB:
        about = payload.get("merge_request")
        number = about.get("iid") if isinstance(about, Mapping) else None
    else:
        about = payload.get("pull_request") or payload.get("issue")
        number = about.get("number") if isinstance(about, Mapping) else None
    try:
        return int(number) if number is not None else None
    except (TypeError, ValueError):
        return None


def forge_review_delivery(delivery: Delivery) -> str:
    """A review or a comment was written on a pull request: read its reviews from the
    forge (the delivery only says where to look) and act on what is new."""
    if delivery.event not in REVIEW_EVENTS.get(delivery.kind, frozenset()):
        return "ignored"
    number = _delivery_number(delivery.kind, delivery.payload)
    pull_request = (
        PullRequest.objects.filter(
            run__task__project_id=delivery.repository.project_id, number=number, state=PullRequestState.OPEN
        )
        .select_related("run__task")
        .first()
        if number
        else None
    )
    if pull_request is None or not delivery.repository.forge_configured:
        return "ignored"
    try:
        pull_request_reviews_follow(pull_request, forge_client_for(delivery.repository))
    except ForgeError as error:
        # Nothing is lost: the poll reads the reviews again.
        PullRequest.objects.filter(pk=pull_request.pk).update(error=error.message)
        logger.warning("Pull request %s: reading its reviews failed: %s", pull_request.pk, error.message)
    return "applied"


def pull_request_reviews_follow(pull_request: PullRequest, client: ForgeClient) -> None:
    """Read the pull request's reviews, record the new ones, act on those waiting, and
    answer the comments a finished round judged (``POLL_FOLLOWERS``; the webhook too)."""
    known = ForgeReview.objects.filter(pull_request=pull_request).values_list("comment_ids", flat=True)
    seen = {str(comment_id) for ids in known for comment_id in ids}
    forge_reviews_record(
        pull_request=pull_request, reviews=reviews_list(client, pull_request.number, seen=seen), own=own_login(client)
    )
    forge_reviews_act(pull_request=pull_request, client=client)
    forge_replies_post(pull_request=pull_request, client=client)


def forge_reviews_record(*, pull_request: PullRequest, reviews: list[ReviewInfo], own: str) -> list[ForgeReview]:
    """Keep the reviews not seen before (by key, and by every comment they cover), not
    AutoCoder's own, that say something. Under the pull request's row: a webhook and the
    poll reading the same reviews record each once."""
    recorded = []
    with transaction.atomic():
        PullRequest.objects.select_for_update().filter(pk=pull_request.pk).first()
        existing = ForgeReview.objects.filter(pull_request=pull_request).values_list("key", "comment_ids")
        keys = {key for key, _ in existing}
        seen = {str(comment_id) for _, ids in existing for comment_id in ids}
        for review in reviews:
            if review.author.lower() == own.lower() or not review.author:
                continue
            if review.key in keys or seen.intersection(review.comment_ids):
                continue
            if not review.body.strip() and not review.comments:
                continue
            try:
                with transaction.atomic():
                    recorded.append(
                        ForgeReview.objects.create(
                            pull_request=pull_request,
                            key=review.key[:100],
                            comment_ids=list(review.comment_ids),
                            author=review.author,
                            author_id=review.author_id,
                            state=review.state,
                            body=review.body,
                            comments=[asdict(comment) for comment in review.comments],
                        )
                    )
            except IntegrityError:
                continue
            keys.add(review.key)
            seen.update(review.comment_ids)
    return recorded


def forge_reviews_act(*, pull_request: PullRequest, client: ForgeClient) -> int:
    """Act on the reviews waiting, oldest first: an untrusted author's is only shown; a
    trusted one's starts a round when the run awaits approval, one at a time (the next
    waits for the run to await approval again). Returns how many rounds started. Asking
    the forge who may write can fail (ForgeError): the review waits for next time."""
    repository = run_repository(pull_request.run)
    if repository is None:
        return 0
    started = 0
    for review in ForgeReview.objects.filter(pull_request=pull_request, outcome=ForgeReviewOutcome.PENDING):
        if not forge_commenter_trusted(
            repository=repository, client=client, login=review.author, user_id=review.author_id
        ):
            ForgeReview.objects.filter(pk=review.pk, outcome=ForgeReviewOutcome.PENDING).update(
                outcome=ForgeReviewOutcome.UNTRUSTED, updated_at=timezone.now()
            )
            continue
        run = PipelineRun.objects.get(pk=pull_request.run_id)
        if run.status != RunStatus.AWAITING_APPROVAL:
            break
        if _review_round(review=review, pull_request=pull_request, run=run):
            started += 1
        break
    return started


def _claim(review: ForgeReview) -> bool:
    now = timezone.now()
    return bool(
        ForgeReview.objects.filter(pk=review.pk, outcome=ForgeReviewOutcome.PENDING)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - timedelta(seconds=CLAIM_SECONDS)))
        .update(claimed_at=now)
    )


def _review_round(*, review: ForgeReview, pull_request: PullRequest, run: PipelineRun) -> bool:
    """The review's line comments become the run's (those the diff does not show go into
    the feedback as text), then the round starts. A review that cannot start now (the run
    moved on) is released to wait."""
    if not _claim(review):
        return False
    not_on_lines: list[str] = []
    try:
        for comment in review.comments:
            if RunLineComment.objects.filter(run=run, forge_comment_id=comment["comment_id"]).exists():
                continue  # an earlier attempt made it
            if not comment.get("line_start") or not comment.get("path"):
                not_on_lines.append(_as_text(comment))
                continue
            try:
                line_comment_create(
                    run=run,
                    author=None,
                    path=comment["path"],
                    line_start=comment["line_start"],
                    line_end=comment["line_end"],
                    side=comment["side"],
                    body=comment["body"] or "(no text)",
                    forge_fields={
                        "forge_review": review,
                        "forge_comment_id": comment["comment_id"],
                        "forge_thread_id": comment["thread_id"],
                        "forge_author": review.author,
                    },
                )
            except ValidationError:
                # Lines the forge's diff showed but this run's does not (an older head).
                not_on_lines.append(_as_text(comment))
        run = pull_request_round_start(
            pull_request=pull_request,
            feedback=_feedback(review, not_on_lines),
            origin=FeedbackOrigin.FORGE_REVIEW,
        )
    except (LineCommentClosed, InvalidTransition) as error:
        ForgeReview.objects.filter(pk=review.pk).update(claimed_at=None)
        logger.info("Review %s on pull request %s waits: %s", review.key, pull_request.pk, error)
        return False
    ForgeReview.objects.filter(pk=review.pk).update(
        outcome=ForgeReviewOutcome.ROUND, feedback_round=run_feedback_round(run=run), updated_at=timezone.now()
    )
    return True


def _lines(comment: Mapping[str, Any]) -> str:
    start, end = comment.get("line_start"), comment.get("line_end")
    if not start:
        return "no line"
    removed = "removed " if comment.get("side") == "old" else ""
    return f"{removed}line {start}" if start == end else f"{removed}lines {start}–{end}"


def _as_text(comment: Mapping[str, Any]) -> str:
    return f"- {comment.get('path') or 'the change'} ({_lines(comment)}): {comment.get('body', '')}"


def _feedback(review: ForgeReview, not_on_lines: list[str]) -> str:
    """The round's feedback: the review's body and the comments that could not be placed
    on lines — the reviewer's words only, which the next tasks learn from (the prompt's
    heading says they come from a review on the forge; the run's page says whose). A
    review of line comments alone says no more; one of nothing at all says who asked."""
    parts = []
    if review.body.strip():
        parts.append(review.body.strip())
    if not_on_lines:
        parts.append("\n".join([NOT_ON_LINES, *not_on_lines]))
    if not parts and not review.comments:
        asked = "requested changes" if review.state == CHANGES_REQUESTED else "commented"
        parts.append(f"{review.author} {asked} in a review of the pull request on the forge, without words.")
    return "\n\n".join(parts)


def pull_request_reviews_resume(*, run_id: int) -> None:
    """After a round (its commits pushed): answer the comments it judged and start the
    next review waiting, if any. A forge that fails is noted; the poll tries again."""
    pull_request = (
        PullRequest.objects.filter(run_id=run_id, state=PullRequestState.OPEN).select_related("run__task").first()
    )
    if pull_request is None or pull_request.run.status != RunStatus.AWAITING_APPROVAL:
        return  # a phase of the round, not its end: nothing to answer yet
    if not ForgeReview.objects.filter(pull_request=pull_request).exists():
        return
    repository = run_repository(pull_request.run)
    if repository is None or not repository.forge_configured:
        return
    client = forge_client_for(repository)
    try:
        forge_replies_post(pull_request=pull_request, client=client)
        forge_reviews_act(pull_request=pull_request, client=client)
    except ForgeError as error:
        PullRequest.objects.filter(pk=pull_request.pk).update(error=error.message)
        logger.warning("Pull request %s: answering its reviews failed: %s", pull_request.pk, error.message)
