"""Merge when green: a person approves the run in AutoCoder with "Approve and merge when
green" (``pull_request_merge_when_green``, on the run's page or the API), which records
who asked and when; once the checks of the pull request's head all pass
(``pull_request_merge_if_green``, after every reading of the checks) AutoCoder merges it on
the forge, and the forge's merge approves the run the way a merge there by hand does
(``pull_request_apply`` → ``MergedOnForge``). The repository must allow it
(``Repository.merge_when_green``); the forge's own approval rules still apply on its side.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from pipelines.models import PipelineRun, PullRequest, RunStatus
from pipelines.runs.services import InvalidTransition
from pipelines.runs.workspace import run_repository
from repos.forges import ForgeError, PullRequestInfo, PullRequestState
from repos.forges.checks import PASSED, pull_request_merge

from .services import forge_client_for, publish_pull_request, pull_request_apply

logger = logging.getLogger(__name__)

MERGE_WHEN_GREEN_OFF = (
    "This repository does not merge pull requests when their checks pass: turn on “Merge when green” under Pull "
    "requests on the project's Repository page."
)
MERGE_NEEDS_OPEN_PULL_REQUEST = "Open the run's pull request first: it is merged on the forge once its checks pass."
MERGE_NOT_AWAITING = "Only a run awaiting approval can be approved to merge when green; this one is {status}."


def pull_request_merge_when_green(*, run: PipelineRun, actor: User) -> PullRequest:
    """A person approves the run's pull request to be merged on the forge once its
    checks pass: recorded (who, when), and merged now if they already pass."""
    repository = run_repository(run)
    if repository is None or not repository.merge_when_green:
        raise InvalidTransition(MERGE_WHEN_GREEN_OFF, extra={"allowed": []})
    with transaction.atomic():
        pull_request = (
            PullRequest.objects.select_for_update()
            .select_related("run__task")
            .filter(run=run, state=PullRequestState.OPEN)
            .first()
        )
        if pull_request is None:
            raise InvalidTransition(MERGE_NEEDS_OPEN_PULL_REQUEST, extra={"allowed": []})
        if pull_request.run.status != RunStatus.AWAITING_APPROVAL:
            status = pull_request.run.get_status_display().lower()
            raise InvalidTransition(MERGE_NOT_AWAITING.format(status=status), extra={"allowed": []})
        pull_request.merge_when_green_by, pull_request.merge_when_green_at = actor, timezone.now()
        pull_request.save(update_fields=["merge_when_green_by", "merge_when_green_at", "updated_at"])
        publish_pull_request(pull_request)
    pull_request_merge_if_green(pull_request=pull_request)
    pull_request.refresh_from_db()
    return pull_request


def pull_request_merge_if_green(*, pull_request: PullRequest) -> bool:
    """Merge on the forge a pull request a person approved to merge when green, if its
    head's checks all pass and the run still awaits approval. Returns whether it merged.
    The forge refusing or failing is noted on the pull request: the next reading of the
    checks (webhook or poll) tries again."""
    pull_request = PullRequest.objects.select_related("run__task").get(pk=pull_request.pk)
    run = pull_request.run
    head = pull_request.pushed_head or run.head_commit
    if (
        pull_request.merge_when_green_at is None
        or pull_request.state != PullRequestState.OPEN
        or run.status != RunStatus.AWAITING_APPROVAL
        or pull_request.checks.get("state") != PASSED
        or pull_request.checks_head != head
    ):
        return False
    repository = run_repository(run)
    if repository is None or not repository.merge_when_green or not repository.forge_configured:
        return False
    # HTTP: no transaction held over it. The forge merges only the head that passed.
    try:
        pull_request_merge(forge_client_for(repository), number=pull_request.number, sha=head)
    except ForgeError as error:
        PullRequest.objects.filter(pk=pull_request.pk).update(error=error.message, updated_at=timezone.now())
        logger.warning("Pull request %s: merging when green failed: %s", pull_request.pk, error.message)
        return False
    info = PullRequestInfo(number=pull_request.number, url=pull_request.url, state=PullRequestState.MERGED)
    pull_request_apply(pull_request=pull_request, info=info)
    return True
