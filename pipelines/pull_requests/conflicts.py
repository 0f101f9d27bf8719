"""The forge says a run's pull request conflicts with its base (GitHub ``mergeable:false``
/ ``mergeable_state: dirty``, GitLab ``has_conflicts`` / ``detailed_merge_status: conflict``,
Gitea ``mergeable:false``), read by the poll (``POLL_FOLLOWERS``) and on the pull request's
update webhooks (``DELIVERY_HANDLERS``): the forge's base is fetched and merged into the
run's branch (pipelines/runs/base_update.py). A clean merge is tested and reviewed again;
conflicts are a Coder round (``pull_request_round_start``, origin the base). Either way,
once the run awaits approval again its new commits are pushed to the same branch as a
fast-forward (``pull_request_follow_run``, after every phase): never forced.

Faults lose nothing: the forge or its git unreachable, a rebase refused on the pushed
branch — the reason is kept on the pull request and the next poll asks again."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.utils import timezone

from core.exceptions import ApplicationError
from pipelines.forge_deliveries import Delivery
from pipelines.models import FeedbackOrigin, PullRequest, RunStatus
from pipelines.runs.base_update import (
    base_conflict_feedback,
    run_mark_base_round,
    run_retest_after_base,
    run_take_base,
)
from pipelines.runs.workspace import run_repository
from repos.forges import ForgeClient, PullRequestState, webhook_pull_request
from repos.forges.mergeability import pull_request_conflicting

from .rounds import pull_request_round_start
from .services import forge_client_for, pull_request_apply

logger = logging.getLogger(__name__)

# GitHub's and Gitea's pull_request actions after which mergeability is asked again (the
# head or the base changed); GitLab's merge request hook action.
UPDATE_ACTIONS = frozenset({"synchronize", "edited", "update"})


def pull_request_base_follow(pull_request: PullRequest, client: ForgeClient) -> str:
    """Ask the forge whether the pull request conflicts; if it does, take the forge's
    base into the run's branch. Returns what was done: "" (nothing), "retesting",
    "round" or "refused"."""
    run = pull_request.run
    if pull_request.state != PullRequestState.OPEN or run.status != RunStatus.AWAITING_APPROVAL:
        return ""
    if not pull_request_conflicting(client=client, number=pull_request.number):
        return ""
    try:
        result = run_take_base(run=run, via="pull_request", from_remote=True)
    except ApplicationError as error:
        # The forge's git unreachable (retryable), a rebase the pushed branch refuses, the
        # worktree gone: said on the pull request, asked again by the next poll.
        PullRequest.objects.filter(pk=pull_request.pk).update(error=error.message, updated_at=timezone.now())
        logger.warning("Pull request %s: taking the base in failed: %s", pull_request.pk, error.message)
        return "refused"
    if result is None:
        return ""  # the branch has the forge's base already: its last push has not reached the forge yet
    if not result.conflicts:
        run_retest_after_base(run=run, result=result)
        return "retesting"
    repository = run_repository(run)
    base = repository.base_branch if repository is not None else pull_request.base_branch
    feedback = base_conflict_feedback(run=run, result=result, base_branch=base)
    run = pull_request_round_start(pull_request=pull_request, feedback=feedback, origin=FeedbackOrigin.BASE)
    from pipelines.review.selectors import run_feedback_round

    run_mark_base_round(run=run, round_number=run_feedback_round(run=run))
    return "round"


def pull_request_base_poll(pull_request: PullRequest, client: ForgeClient) -> None:
    """The poll's follower (POLL_FOLLOWERS)."""
    pull_request_base_follow(pull_request, client)


def pull_request_update_delivery(delivery: Delivery) -> str:
    """A pull request's head or base changed (GitHub/Gitea ``pull_request`` synchronize or
    edited, GitLab's merge request update): its state is applied, then its mergeability
    asked of the forge (a webhook's own ``mergeable`` is often not computed yet)."""
    payload = delivery.payload
    attributes = payload.get("object_attributes")
    if delivery.event == "merge_request" and isinstance(attributes, Mapping):
        action = attributes.get("action")
    elif delivery.event == "pull_request":
        action = payload.get("action")
    else:
        return "ignored"
    info = webhook_pull_request(kind=delivery.kind, payload=payload) if action in UPDATE_ACTIONS else None
    if info is None:
        return "ignored"
    pull_request = (
        PullRequest.objects.filter(run__task__project_id=delivery.repository.project_id, number=info.number)
        .select_related("run__task__project__owner")
        .first()
    )
    if pull_request is None:
        return "ignored"
    pull_request = pull_request_apply(pull_request=pull_request, info=info)
    pull_request_base_follow(pull_request, forge_client_for(delivery.repository))
    return "applied"
