"""The forge asks for changes on a run's pull request — a failing check, a review, a base
that moved — and the run goes back to the Coder: ``pull_request_round_start`` is the one
door for all of them, the same request for changes a person makes on the run's page. When
the round is over and the run awaits approval again, ``pull_request_follow_run`` pushes its
new commits to the same branch (never forced), so the pull request shows them and the
forge's checks run on them."""

from __future__ import annotations

import logging

from django.utils import timezone

from pipelines.models import FeedbackOrigin, PipelineRun, PullRequest, RunStatus
from pipelines.review.services import run_request_changes
from pipelines.runs.services import InvalidTransition
from pipelines.runs.workspace import run_repository
from repos.clone import PushError
from repos.forges import PullRequestState
from repos.services import branch_push

from .services import publish_pull_request

logger = logging.getLogger(__name__)

NOT_AWAITING_ROUND = "The run is {status}: the forge's request waits until it awaits approval again."


def pull_request_round_start(*, pull_request: PullRequest, feedback: str, origin: FeedbackOrigin) -> PipelineRun:
    """Send the run of ``pull_request`` back to the Coder with ``feedback`` (and the run's
    pending line comments) — ``origin`` says what on the forge asked (its checks, a
    review, the base) and is kept on the run and in its history. InvalidTransition when
    the run is not awaiting approval (it is working, or finished)."""
    run = pull_request.run
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise InvalidTransition(
            NOT_AWAITING_ROUND.format(status=run.get_status_display().lower()), extra={"allowed": []}
        )
    if origin == FeedbackOrigin.PERSON:
        raise ValueError("A round from the forge has the forge's origin.")
    return run_request_changes(run=run, feedback=feedback, origin=origin)


def pull_request_follow_run(*, run_id: int) -> bool:
    """A run awaiting approval whose open pull request does not have its head yet: push
    the branch (a fast-forward of the forge's branch: never forced) and record the head
    pushed. Returns whether it pushed. A refused or failed push is noted on the pull
    request and tried again by the poll; nothing is lost, the commits stay on the run's
    branch here."""
    pull_request = (
        PullRequest.objects.filter(run_id=run_id, state=PullRequestState.OPEN, run__status=RunStatus.AWAITING_APPROVAL)
        .select_related("run__task__project__owner")
        .first()
    )
    if pull_request is None:
        return False
    run = pull_request.run
    if not run.head_commit or pull_request.pushed_head == run.head_commit:
        return False
    repository = run_repository(run)
    if repository is None:
        return False
    # Git is slow I/O: no transaction is held over the push.
    try:
        branch_push(repository=repository, user=run.task.project.owner, branch=run.branch)
    except PushError as error:
        PullRequest.objects.filter(pk=pull_request.pk).update(error=error.message, updated_at=timezone.now())
        logger.warning("Run %s: pushing to pull request #%s failed: %s", run.pk, pull_request.number, error.message)
        return False
    PullRequest.objects.filter(pk=pull_request.pk).update(
        pushed_head=run.head_commit, error="", updated_at=timezone.now()
    )
    pull_request.pushed_head = run.head_commit
    publish_pull_request(pull_request)
    return True
