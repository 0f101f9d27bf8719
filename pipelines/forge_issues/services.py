"""Issues on the team's forge become tasks of the repository's project: those with the
repository's label (``forge_issue_label``) or assigned to the access token's own account
(``forge_issue_assigned``). The forge says so by webhook (``webhooks.py``) or the poll here;
either way ``forge_issue_apply`` does the rest, once per issue (ForgeIssue is unique per
repository and number, so a delivery and a poll of the same change make one task).

Then the task follows its issue: an edit on the forge changes the task's title and
description while no run has left the queue, and after that is only noted (the running
work keeps the task it started from); a closed issue cancels a queued run and marks a task
not started, and leaves a run at work alone with a note. A run's pull request says
"Closes #N", so merging it on the forge closes the issue there; a run merged here closes
it from here, with a comment naming the commit (``forge_issue_close_pending``).

The issue's title and body are its authors' text: stored as text, bounded, shown escaped.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.exceptions import InvalidTransition
from pipelines.models import ACTIVE_STATUSES, ForgeIssue, ForgeIssueState, PipelineRun, RunStatus, RunTransition
from pipelines.runs.services import StaleRun, run_cancel
from repos.forges import ForgeClient, ForgeError
from repos.forges.issues import IssueInfo, commit_web_url, forge_account_login, issue_close, issues_list
from repos.models import Repository
from repos.services import repository_forge_client
from tasks.models import TITLE_MAX_LENGTH, Task, TaskStatus
from tasks.services import task_create, task_update

logger = logging.getLogger(__name__)

EDITED_AFTER_START = "Edited on the forge after work started: the run goes on with the task as it was."
CLOSED_QUEUED = "Closed on the forge before work started: its queued run was cancelled."
CLOSED_NOT_STARTED = "Closed on the forge before work started."
CLOSED_WHILE_WORKING = "Closed on the forge while a run works on it: the run was left (cancel it here if unwanted)."
CLOSED = "Closed on the forge."
CLOSED_HERE = "Closed by AutoCoder: the run was merged here as {commit}."
CLOSE_COMMENT = "AutoCoder merged this into `{base}` as {commit}; closing."


def _stamp(text: str) -> datetime:
    """The forge's updated_at (no stamp: now, so that it counts as the newest)."""
    parsed = parse_datetime(text) if text else None
    if parsed is None:
        return timezone.now()
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _wanted(repository: Repository, issue: IssueInfo, login: str) -> bool:
    label = repository.forge_issue_label.casefold()
    if label and any(name.casefold() == label for name in issue.labels):
        return True
    return bool(repository.forge_issue_assigned and login and login in issue.assignees)


def _title(issue: IssueInfo) -> str:
    return (issue.title.strip() or f"Issue #{issue.number}")[:TITLE_MAX_LENGTH]


def _keep_summary(issue: ForgeIssue) -> None:
    """The card's and the API's view of the issue (``Task.pipeline_state``)."""
    if issue.task_id is None:
        return
    state = Task.objects.filter(pk=issue.task_id).values_list("pipeline_state", flat=True).get()
    Task.objects.filter(pk=issue.task_id).update(pipeline_state={**state, "forge_issue": issue.summary()})


def forge_issue_apply(*, repository: Repository, issue: IssueInfo, login: str = "") -> ForgeIssue | None:
    """What the forge says of one issue now: import it (open, and labelled or assigned to
    ``login``, the token's account) or follow it (known). None: not ours."""
    known = ForgeIssue.objects.filter(repository=repository, number=issue.number).first()
    if known is None:
        if issue.state != ForgeIssueState.OPEN or not _wanted(repository, issue, login):
            return None
        try:
            return _import(repository, issue)
        except IntegrityError:
            # The same issue imported meanwhile (its webhook and the poll at once): follow it.
            known = ForgeIssue.objects.get(repository=repository, number=issue.number)
    return _follow(known, issue)


def _import(repository: Repository, issue: IssueInfo) -> ForgeIssue:
    with transaction.atomic():
        task = task_create(project=repository.project, title=_title(issue), description=issue.body)
        imported = ForgeIssue.objects.create(
            repository=repository,
            forge_kind=repository.forge_kind,
            number=issue.number,
            url=issue.url,
            state=ForgeIssueState.OPEN,
            title=issue.title,
            task=task,
            forge_updated_at=_stamp(issue.updated_at),
            body_sha256=_digest(issue.body),
        )
        _keep_summary(imported)
    logger.info("Forge issue #%s of repository %s became task %s", issue.number, repository.pk, task.pk)
    return imported


def _started(task_id: int) -> bool:
    """Whether a run of the task ever left the queue for work."""
    return (
        RunTransition.objects.filter(run__task_id=task_id, from_status=RunStatus.QUEUED)
        .exclude(to_status=RunStatus.CANCELLED)
        .exists()
    )


def _follow(known: ForgeIssue, issue: IssueInfo) -> ForgeIssue:
    updated = _stamp(issue.updated_at)
    queued: list[PipelineRun] = []
    with transaction.atomic():
        row = ForgeIssue.objects.select_for_update().get(pk=known.pk)
        if updated < row.forge_updated_at:
            return row  # an older report (a delivery late, a poll's page from before)
        task = Task.objects.filter(pk=row.task_id).first() if row.task_id else None
        started = task is not None and _started(task.pk)
        if (issue.title != row.title or _digest(issue.body) != row.body_sha256) and task is not None:
            if started:
                row.note = EDITED_AFTER_START
            else:
                task_update(task=task, title=_title(issue), description=issue.body)
        if issue.state != row.state:
            row.note = ""
            if issue.state == ForgeIssueState.CLOSED and task is not None and task.status != TaskStatus.DONE:
                queued = list(PipelineRun.objects.filter(task=task, status=RunStatus.QUEUED))
                working = PipelineRun.objects.filter(task=task, status__in=ACTIVE_STATUSES).exclude(
                    status=RunStatus.QUEUED
                )
                if working.exists():
                    row.note = CLOSED_WHILE_WORKING
                elif queued:
                    row.note = CLOSED_QUEUED
                else:
                    row.note = CLOSED if started else CLOSED_NOT_STARTED
        row.state, row.title, row.url = issue.state, issue.title, issue.url or row.url
        row.forge_updated_at, row.body_sha256 = updated, _digest(issue.body)
        row.save()
        _keep_summary(row)
    for run in queued:  # each in its own transaction, as a person's Cancel would be
        try:
            run_cancel(run=run)
        except (InvalidTransition, StaleRun) as error:  # it left the queue meanwhile: at work, it is left
            logger.info("Run %s of closed issue #%s not cancelled: %s", run.pk, row.number, error)
    return row


def _login(repository: Repository, client: ForgeClient) -> str:
    """The token's account, asked of the forge once per token (ForgeError as it comes)."""
    if not repository.forge_issue_assigned:
        return ""
    if not repository.forge_login:
        repository.forge_login = forge_account_login(client)
        Repository.objects.filter(pk=repository.pk).update(forge_login=repository.forge_login)
    return repository.forge_login


def forge_issue_login(*, repository: Repository) -> str:
    """The token's account for a webhook's delivery; '' when the forge cannot say now
    (the poll imports an assigned issue later)."""
    try:
        return _login(repository, repository_forge_client(repository))
    except ForgeError as error:
        logger.warning("Repository %s: the token's account unknown: %s", repository.pk, error.message)
        return ""


def forge_issues_poll_repository(*, repository: Repository) -> int:
    """Ask the forge for the repository's issues changed since the last poll and apply
    each; how many were read. A forge that fails is noted on the repository and nothing
    moves: the next poll asks from the same place again."""
    client = repository_forge_client(repository)
    now = timezone.now()
    found: dict[int, IssueInfo] = {}
    try:
        login = _login(repository, client)
        since = repository.forge_issues_since
        if repository.forge_issue_label:
            found.update((i.number, i) for i in issues_list(client, label=repository.forge_issue_label, since=since))
        if login:
            found.update((i.number, i) for i in issues_list(client, assignee=login, since=since))
    except ForgeError as error:
        failed = {"forge_issues_checked_at": now, "forge_issues_error": error.message}
        Repository.objects.filter(pk=repository.pk).update(**failed)
        logger.warning("Forge issues of repository %s: %s", repository.pk, error.message)
        return 0
    for issue in sorted(found.values(), key=lambda i: i.number):
        forge_issue_apply(repository=repository, issue=issue, login=login)
    stamps = [issue.updated_at for issue in found.values() if issue.updated_at]
    newest = max(stamps, key=_stamp) if stamps else repository.forge_issues_since
    Repository.objects.filter(pk=repository.pk).update(
        forge_issues_since=newest, forge_issues_checked_at=now, forge_issues_error=""
    )
    for pending in ForgeIssue.objects.filter(repository=repository).exclude(close_commit=""):
        _close(pending, client)
    return len(found)


def forge_issues_poll(*, older_than_seconds: int | None = None) -> int:
    """Poll each repository that imports issues and was not asked for FORGE_ISSUE_POLL_SECONDS;
    how many repositories were asked."""
    seconds = settings.FORGE_ISSUE_POLL_SECONDS if older_than_seconds is None else older_than_seconds
    cutoff = timezone.now() - timedelta(seconds=seconds)
    due = (
        Repository.objects.exclude(forge_kind="")
        .exclude(forge_api_url="")
        .exclude(forge_repository="")
        .exclude(forge_token_encrypted="")
        .filter(Q(forge_issue_label__gt="") | Q(forge_issue_assigned=True))
        .filter(Q(forge_issues_checked_at__isnull=True) | Q(forge_issues_checked_at__lte=cutoff))
        .select_related("project")
        .order_by("forge_issues_checked_at", "pk")
    )
    asked = 0
    for repository in due[: settings.FORGE_ISSUE_POLL_BATCH]:
        forge_issues_poll_repository(repository=repository)
        asked += 1
    return asked


def forge_issue_close_pending(*, task_id: int) -> ForgeIssue | None:
    """Close the task's issue on the forge after its run was merged here (the commit is
    ``close_commit``). A forge that fails keeps it pending: the poll tries again."""
    pending = ForgeIssue.objects.filter(task_id=task_id).exclude(close_commit="").select_related("repository").first()
    if pending is None or not pending.repository.forge_configured:
        return pending
    return _close(pending, repository_forge_client(pending.repository))


def _close(pending: ForgeIssue, client: ForgeClient) -> ForgeIssue:
    commit = pending.close_commit
    link = commit_web_url(kind=pending.forge_kind, issue_url=pending.url, commit=commit)
    named = f"[{commit[:12]}]({link})" if link else f"`{commit[:12]}`"
    base = pending.repository.base_branch or "the base branch"
    try:
        if pending.state == ForgeIssueState.OPEN:
            issue_close(client, pending.number, comment=CLOSE_COMMENT.format(base=base, commit=named))
    except ForgeError as error:
        ForgeIssue.objects.filter(pk=pending.pk).update(error=error.message)
        logger.warning("Forge issue %s not closed: %s", pending.pk, error.message)
        pending.error = error.message
        return pending
    with transaction.atomic():
        ForgeIssue.objects.filter(pk=pending.pk).update(
            state=ForgeIssueState.CLOSED, close_commit="", error="", note=CLOSED_HERE.format(commit=commit[:12])
        )
        pending.refresh_from_db()
        _keep_summary(pending)
    return pending
