"""Asking the forge about open pull requests not heard of for a while (no webhook, or a
delivery lost): their state first (``pull_request_apply``), then, for one still open,
each of ``POLL_FOLLOWERS`` — what other rooms follow on an open pull request (checks,
reviews, mergeability …) — with the same client. A forge that fails is noted on the pull
request and asked again next time; a follower's failure does not stop the others."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from pipelines.models import PullRequest
from pipelines.runs.workspace import run_repository
from repos.forges import ForgeClient, ForgeError, PullRequestState

from .checks import pull_request_checks_follow
from .conflicts import pull_request_base_poll
from .reviews import pull_request_reviews_follow
from .rounds import pull_request_follow_run
from .services import forge_client_for, pull_request_apply

logger = logging.getLogger(__name__)


def _push_pending(pull_request: PullRequest, client: ForgeClient) -> None:
    """A push after a round that failed (the forge's git was down): try it again."""
    pull_request_follow_run(run_id=pull_request.run_id)


# Each asks the forge about one open pull request and applies what it learns.
# Reviews after the push: their replies wait for the round's commits to be there.
POLL_FOLLOWERS: tuple[Callable[[PullRequest, ForgeClient], None], ...] = (
    _push_pending,
    pull_request_reviews_follow,
    pull_request_checks_follow,
    pull_request_base_poll,
)


def pull_requests_poll(*, older_than_seconds: int | None = None) -> int:
    """Ask the forge about open pull requests not heard of for ``older_than_seconds``
    (PULL_REQUEST_POLL_SECONDS). Returns how many were asked about."""
    seconds = settings.PULL_REQUEST_POLL_SECONDS if older_than_seconds is None else older_than_seconds
    cutoff = timezone.now() - timedelta(seconds=seconds)
    due = PullRequest.objects.filter(state=PullRequestState.OPEN, state_checked_at__lte=cutoff).select_related(
        "run__task"
    )
    asked = 0
    for pull_request in due.order_by("state_checked_at")[: settings.PULL_REQUEST_POLL_BATCH]:
        repository = run_repository(pull_request.run)
        if repository is None or not repository.forge_configured:
            continue
        asked += 1
        client = forge_client_for(repository)
        try:
            info = client.pull_request(pull_request.number)
        except ForgeError as error:
            PullRequest.objects.filter(pk=pull_request.pk).update(state_checked_at=timezone.now(), error=error.message)
            logger.warning("Pull request %s: %s", pull_request.pk, error.message)
            continue
        pull_request = pull_request_apply(pull_request=pull_request, info=info)
        if pull_request.state != PullRequestState.OPEN:
            continue
        for follower in POLL_FOLLOWERS:
            try:
                follower(pull_request, client)
            except ForgeError as error:
                PullRequest.objects.filter(pk=pull_request.pk).update(error=error.message)
                logger.warning("Pull request %s (%s): %s", pull_request.pk, follower.__name__, error.message)
    return asked
