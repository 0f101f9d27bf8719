"""A run's pull request on the team's forge: opened from a run awaiting approval, and
followed until the forge says it was merged (the run is approved, the task is Done) or
closed unmerged (the run is cancelled, the task goes back to Backlog).

The forge reports by webhook (``pull_request_webhook``: the delivery's signature checked
with the repository's secret, each delivery applied once) and, where no webhook is set,
by a beat job that asks about open ones (``pull_requests_poll``). Git and HTTP are slow
I/O: nothing here holds a transaction over them. Failures lose nothing: the run stays
awaiting approval and its branch stays, and the error says what to do.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from core.exceptions import ApplicationError, NotFound
from pipelines.events import PullRequestChange, event_publish
from pipelines.forge_issues.selectors import forge_issue_closing_line
from pipelines.models import PipelineRun, PullRequest, RunStatus
from pipelines.review.services import MergedOnForge, run_approve
from pipelines.runs.services import InvalidTransition, run_transition
from pipelines.runs.workspace import run_repository
from repos.clone import PushError
from repos.forges import (
    ForgeClient,
    ForgeError,
    PullRequestInfo,
    PullRequestState,
)
from repos.models import Repository
from repos.services import branch_push, repository_forge_client
from tasks.models import Task

from .card import pull_request_checks_card

logger = logging.getLogger(__name__)

NOT_AWAITING = "Only a run awaiting approval can open a pull request; this one is {status}."
NO_BRANCH = "This run has no branch to push: it did not work on a linked repository."
NO_FORGE = (
    "The repository has no forge to open pull requests on: set one (and an access token) under Pull requests on "
    "the project's Repository page."
)
ALREADY_FINISHED = "This run's pull request is already {state}."
BODY_FINDINGS_SHOWN = 10


class PullRequestFailed(ApplicationError):
    """The push or the forge refused (400), or could not be reached (503, ``retryable``)."""

    code = "pull_request_failed"

    def __init__(self, message: str, *, code: str, retryable: bool) -> None:
        super().__init__(message, extra={"reason": code, "retryable": retryable})
        self.retryable = retryable
        self.status_code = 503 if retryable else 400


def forge_client_for(repository: Repository) -> ForgeClient:
    """The repository's forge, with its token."""
    return repository_forge_client(repository)


def pull_request_text(run: PipelineRun) -> tuple[str, str]:
    """The title and body (Markdown) of a run's pull request: the task, the plan, the
    review, the tests and what the run cost."""
    task = run.task
    lines = [task.description.strip() or "_No description._", "", "## Plan", ""]
    closing = forge_issue_closing_line(task_id=task.pk)
    if closing:  # merged on the forge, the pull request closes the task's issue there
        lines[1:1] = ["", closing]
    plan = sorted(run.plan or [], key=lambda step: step.get("order", 0)) if isinstance(run.plan, list) else []
    lines += [f"{i}. **{step.get('title', '')}** — {step.get('description', '')}" for i, step in enumerate(plan, 1)]
    if not plan:
        lines.append("_No plan recorded._")
    review = (run.review_history or [])[-1] if run.review_history else {}
    findings = review.get("findings", []) if isinstance(review, dict) else []
    lines += ["", "## Review", ""]
    if review:
        verdict = "passed" if review.get("pass") else "did not pass"
        lines.append(f"The Reviewer's last round ({len(run.review_history)} in all) {verdict}.")
        lines += [f"- {f.get('severity', 'note')}: {f.get('message', '')}" for f in findings[:BODY_FINDINGS_SHOWN]]
    else:
        lines.append("_No review recorded._")
    verify = run.verify_result or {}
    lines += ["", "## Tests", ""]
    if verify:
        outcome = "passed" if verify.get("passed") else "failed"
        lines.append(f"`{verify.get('command', 'the test command')}` {outcome} (exit {verify.get('exit_code')}).")
    else:
        lines.append("_The project has no test command._")
    cost = Decimal(run.cost_usd).quantize(Decimal("0.0001"))
    lines += [
        "",
        "---",
        f"Opened by AutoCoder from run {run.number} of task #{task.pk}: {run.input_tokens:,} input and "
        f"{run.output_tokens:,} output tokens, ${cost} ({run.model or 'the default model'}).",
    ]
    return task.title[:250], "\n".join(lines)


def run_open_pull_request(*, run: PipelineRun, actor: User | None = None) -> PullRequest:
    """Push the run's branch and open its pull request; the one already open if any."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise InvalidTransition(NOT_AWAITING.format(status=run.get_status_display().lower()), extra={"allowed": []})
    existing = PullRequest.objects.filter(run=run).first()
    if existing is not None:
        if existing.state == PullRequestState.OPEN:
            return existing
        raise InvalidTransition(ALREADY_FINISHED.format(state=existing.state), extra={"allowed": []})
    if not run.branch:
        raise InvalidTransition(NO_BRANCH, extra={"allowed": []})
    repository = run_repository(run)
    if repository is None or not repository.forge_configured:
        raise InvalidTransition(NO_FORGE, extra={"allowed": []})
    try:
        pushed_to = branch_push(repository=repository, user=run.task.project.owner, branch=run.branch)
    except PushError as error:
        raise PullRequestFailed(error.message, code="push_failed", retryable=error.retryable) from None
    title, body = pull_request_text(run)
    client = forge_client_for(repository)
    adopted = False
    try:
        info = client.open_pull_request(head=run.branch, base=repository.base_branch, title=title, body=body)
    except ForgeError as error:
        # One already open for the branch (a person opened it by hand) is the run's.
        found = _open_one_from(client, run.branch) if error.status in (409, 422) else None
        if found is None:
            raise PullRequestFailed(error.message, code=error.code, retryable=error.retryable) from None
        info, adopted = found, True
    with transaction.atomic():
        pull_request, _ = PullRequest.objects.get_or_create(
            run=run,
            defaults={
                "forge_kind": repository.forge_kind,
                "number": info.number,
                "url": info.url,
                "state": info.state,
                "head_branch": run.branch,
                "base_branch": repository.base_branch,
                "pushed_to": pushed_to,
                "pushed_head": run.head_commit,
                "opened_by": actor,
                "adopted": adopted,
                "state_checked_at": timezone.now(),
            },
        )
        publish_pull_request(pull_request)
    return pull_request


def _open_one_from(client: ForgeClient, branch: str) -> PullRequestInfo | None:
    try:
        return client.open_pull_request_from(branch)
    except ForgeError:
        return None  # the forge's first refusal says more


def publish_pull_request(pull_request: PullRequest) -> None:
    """Tell the card (the task's run summary) and the pages: its state changed."""
    run = pull_request.run
    summary = {"number": pull_request.number, "url": pull_request.url, "state": pull_request.state}
    checks = pull_request_checks_card(pull_request)  # its CI (pipelines.pull_requests.checks)
    if checks:
        summary["checks"] = checks
    state = Task.objects.filter(pk=run.task_id).values_list("pipeline_state", flat=True).get()
    if state.get("run_id") == run.pk:
        Task.objects.filter(pk=run.task_id).update(pipeline_state={**state, "pull_request": summary})
    event_publish(
        task=run.task,
        run=run,
        event=PullRequestChange(
            task_id=run.task_id,
            run_id=run.pk,
            number=pull_request.number,
            url=pull_request.url,
            state=pull_request.state,
        ),
    )


def pull_request_apply(*, pull_request: PullRequest, info: PullRequestInfo) -> PullRequest:
    """The forge says the pull request is in ``info.state``: record it and, merged or
    closed, end the run (approved: the task is Done; cancelled: back to Backlog)."""
    now = timezone.now()
    with transaction.atomic():
        locked = PullRequest.objects.select_for_update().select_related("run__task").get(pk=pull_request.pk)
        changed = locked.state != info.state
        locked.state_checked_at, locked.error = now, ""
        if changed:
            locked.state = info.state
        locked.save(update_fields=["state", "state_checked_at", "error", "updated_at"])
        run = locked.run
        if not changed or run.status != RunStatus.AWAITING_APPROVAL:
            return locked
        if info.state == PullRequestState.MERGED:
            run_approve(run=run, via=MergedOnForge(number=locked.number, url=locked.url))
        elif info.state == PullRequestState.CLOSED:
            run_transition(
                run=run, to_status=RunStatus.CANCELLED, reason=f"pull request #{locked.number} closed unmerged"
            )
        publish_pull_request(locked)
    return locked


def pull_request_for_user(*, user: User, run_id: int) -> PullRequest:
    pull_request = PullRequest.objects.filter(run_id=run_id, run__task__project__owner=user).first()
    if pull_request is None:
        raise NotFound("This run has no pull request.")
    return pull_request
