"""The task page's pipeline panel: the person's actions on a run, and the panel partial
(its context: pipelines.panel).

Thin: each action calls one service, reports the outcome through django.contrib.messages
and sends the person back to the task page — or, for htmx, answers with the refreshed
panel (which shows the messages itself). Not yours and not there are the same 404.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from accounts.selectors import request_user
from core.exceptions import ApplicationError
from pipelines.agents.lineage import context_run_get_for_user, lineage_rows
from pipelines.forms import LineCommentBodyForm, LineCommentForm, RequestChangesForm, RunMessageForm, StartRunForm
from pipelines.messages.selectors import run_message_note
from pipelines.messages.services import run_message_send
from pipelines.models import RunStatus
from pipelines.panel import panel_context
from pipelines.pull_requests.merging import pull_request_merge_when_green
from pipelines.pull_requests.services import run_open_pull_request
from pipelines.review import selectors as review_selectors
from pipelines.review import services as review_services
from pipelines.runs import services
from pipelines.runs.places import runs_waiting
from pipelines.runs.selectors import run_get_for_user
from tasks.models import Task
from tasks.selectors import task_get_for_user

RUN_STARTED = "Run {number} started. The Planner goes first."
RUN_QUEUED = "Run {number} is queued: it starts when a place to run frees, then the Planner goes first."
RUN_RESUMED = "Run {number} resumed: {phase} again."
RUN_RESTARTED = "Run {number} started again from planning."
RUN_CANCELLED = "Run {number} cancelled."
CHANGES_REQUESTED = "Changes requested: the Coder is working on your feedback."
CHANGES_REQUESTED_WITH_COMMENTS = (
    "Changes requested: the Coder is working on your feedback and {count} line comment{plural}."
)
LINE_COMMENT_ADDED = "Comment added to {path}, {lines}. It goes to the Coder with your request for changes."
LINE_COMMENT_SAVED = "Comment saved."
LINE_COMMENT_DELETED = "Comment deleted."
RUN_APPROVED = "Approved. The task moved to Done."
# With the message's note (pipelines/messages/selectors.py): who reads it, and when.
MESSAGE_SENT = "Message sent: {note}."
RUN_APPROVED_NOTHING_MERGED = (
    "Approved. The run changed nothing, so nothing was merged into {base}. The task moved to Done."
)
RUN_APPROVED_MERGED = "Approved and merged into {base} ({commit}). The task moved to Done."
BRANCH_DISCARDED = "Branch {branch} deleted."


def _respond(request: HttpRequest, task: Task) -> HttpResponse:
    """Back to the task page, or (htmx) the refreshed panel."""
    if request.htmx:  # type: ignore[attr-defined]
        task.refresh_from_db()  # the action may have moved it to another column
        response = render(request, "pipelines/_refresh.html", panel_context(task=task, partial=True))
    else:
        response = redirect(reverse("tasks:detail", args=[task.pk]) + "#pipeline")
    patch_vary_headers(response, ["HX-Request"])
    return response


PULL_REQUEST_OPENED = "Pull request #{number} is open on the forge: merged there, the task moves to Done."
MERGE_WHEN_GREEN_RECORDED = "Approved: pull request #{number} is merged on the forge once all its checks pass."
MERGED_WHEN_GREEN = "Its checks pass: pull request #{number} was merged on the forge."


def _act(request: HttpRequest, task: Task, action: Callable[[], str]) -> HttpResponse:
    """Run ``action`` (it returns the success message); failures become error messages."""
    try:
        success = action()
    except ApplicationError as exc:
        messages.error(request, exc.message)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, success)
    return _respond(request, task)


def _form_error(form: StartRunForm | RequestChangesForm | LineCommentBodyForm | RunMessageForm) -> str:
    return " ".join(str(error) for errors in form.errors.values() for error in errors)


@login_required
@require_GET
def pipeline_panel(request: HttpRequest, task_id: int) -> HttpResponse:
    """The panel alone, for htmx refreshes; a plain visit goes to the task page."""
    task = task_get_for_user(user=request_user(request), task_id=task_id)
    return _respond(request, task)


@login_required
@require_POST
def pipeline_start(request: HttpRequest, task_id: int) -> HttpResponse:
    task = task_get_for_user(user=request_user(request), task_id=task_id)
    form = StartRunForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
        return _respond(request, task)

    def start() -> str:
        run = services.run_start(task=task, user=request_user(request), api_key=form.cleaned_data["api_key"] or None)
        if run.status == RunStatus.QUEUED and runs_waiting(run_ids=[run.pk]):
            return RUN_QUEUED.format(number=run.number)
        return RUN_STARTED.format(number=run.number)

    return _act(request, task, start)


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)

    def cancel() -> str:
        services.run_cancel(run=run, actor=request_user(request))
        return RUN_CANCELLED.format(number=run.number)

    return _act(request, run.task, cancel)


@login_required
@require_POST
def run_retry(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)
    form = StartRunForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
        return _respond(request, run.task)
    was_paused = run.status == RunStatus.PAUSED

    def retry() -> str:
        retried = services.run_retry(run=run, actor=request_user(request), api_key=form.cleaned_data["api_key"] or None)
        if was_paused:
            return RUN_RESUMED.format(number=retried.number, phase=retried.get_status_display().lower())
        return RUN_RESTARTED.format(number=retried.number)

    return _act(request, run.task, retry)


@login_required
@require_POST
def run_request_changes(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)
    form = RequestChangesForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
        return _respond(request, run.task)

    def request_changes() -> str:
        pending = len(review_selectors.line_comments_pending(run=run))
        review_services.run_request_changes(
            run=run, feedback=form.cleaned_data["feedback"], actor=request_user(request)
        )
        if pending:
            return CHANGES_REQUESTED_WITH_COMMENTS.format(count=pending, plural="" if pending == 1 else "s")
        return CHANGES_REQUESTED

    return _act(request, run.task, request_changes)


@login_required
@require_POST
def run_line_comment_create(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)
    form = LineCommentForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
        return _respond(request, run.task)

    def create() -> str:
        comment = review_services.line_comment_create(run=run, author=request_user(request), **form.cleaned_data)
        return LINE_COMMENT_ADDED.format(path=comment.path, lines=comment.lines_phrase)

    return _act(request, run.task, create)


@login_required
@require_POST
def run_line_comment_edit(request: HttpRequest, run_id: int, comment_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)
    comment = review_selectors.line_comment_get_for_run(run=run, comment_id=comment_id)
    form = LineCommentBodyForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
        return _respond(request, run.task)

    def edit() -> str:
        review_services.line_comment_update(comment=comment, body=form.cleaned_data["body"])
        return LINE_COMMENT_SAVED

    return _act(request, run.task, edit)


@login_required
@require_POST
def run_line_comment_delete(request: HttpRequest, run_id: int, comment_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)
    comment = review_selectors.line_comment_get_for_run(run=run, comment_id=comment_id)

    def delete() -> str:
        review_services.line_comment_delete(comment=comment)
        return LINE_COMMENT_DELETED

    return _act(request, run.task, delete)


@login_required
@require_POST
def run_approve(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)

    def approve() -> str:
        approved = review_services.run_approve(run=run, actor=request_user(request))
        merge = approved.merge_result or {}
        if merge.get("already_in_base"):
            return RUN_APPROVED_NOTHING_MERGED.format(base=merge.get("base_branch") or "the base branch")
        if merge.get("merged"):
            return RUN_APPROVED_MERGED.format(
                base=merge.get("base_branch") or "the base branch", commit=merge["commit"][:10]
            )
        return RUN_APPROVED

    return _act(request, run.task, approve)


@login_required
@require_POST
def run_open_pull_request_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)

    def open_pull_request() -> str:
        pull_request = run_open_pull_request(run=run, actor=request_user(request))
        return PULL_REQUEST_OPENED.format(number=pull_request.number)

    return _act(request, run.task, open_pull_request)


@login_required
@require_POST
def run_merge_when_green_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)

    def merge_when_green() -> str:
        pull_request = pull_request_merge_when_green(run=run, actor=request_user(request))
        done = MERGED_WHEN_GREEN if pull_request.state == "merged" else MERGE_WHEN_GREEN_RECORDED
        return done.format(number=pull_request.number)

    return _act(request, run.task, merge_when_green)


@login_required
@require_GET
def run_patch(request: HttpRequest, run_id: int) -> HttpResponse:
    from pipelines.api.views import patch_response

    return patch_response(run_get_for_user(user=request_user(request), run_id=run_id))


@login_required
@require_POST
def run_discard_branch(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)

    def discard() -> str:
        services.run_discard_branch(run=run, actor=request_user(request))
        return BRANCH_DISCARDED.format(branch=run.branch)

    return _act(request, run.task, discard)


@login_required
@require_GET
def run_lineage(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's context lineage: what each agent was given and produced, in order."""
    user = request_user(request)
    run = context_run_get_for_user(user=user, run_id=run_id)
    rows = lineage_rows(user=user, run=run)
    return render(request, "pipelines/lineage_run.html", {"run": run, "task": run.task, "rows": rows})


@login_required
@require_POST
def run_message(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)
    form = RunMessageForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
        return _respond(request, run.task)

    def send() -> str:
        message = run_message_send(run=run, author=request_user(request), body=form.cleaned_data["body"])
        return MESSAGE_SENT.format(note=run_message_note(message=message))

    return _act(request, run.task, send)
