"""The task page's pipeline panel: the person's actions on a run, and the panel partial.

Thin: each action calls one service, reports the outcome through django.contrib.messages
and sends the person back to the task page — or, for htmx, answers with the refreshed
panel (which shows the messages itself). Not yours and not there are the same 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
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
from tasks.models import Task
from tasks.selectors import task_get_for_user

from . import services
from .forms import RequestChangesForm, StartRunForm
from .models import MAX_REVIEW_ITERATIONS, WORKING_STATUSES, PipelineRun, RunStatus
from .selectors import (
    LOG_AGENTS,
    run_allowed_actions,
    run_diff,
    run_get_for_user,
    run_latest_for_task,
    run_stopped_in,
    run_totals_for_task,
    run_transcript_for_task,
)

RUN_STARTED = "Run {number} started. The Planner goes first."
RUN_RESUMED = "Run {number} resumed: {phase} again."
RUN_RESTARTED = "Run {number} started again from planning."
RUN_CANCELLED = "Run {number} cancelled."
CHANGES_REQUESTED = "Changes requested: the Coder is working on your feedback."
RUN_APPROVED = "Approved. The task moved to Done."
RUN_APPROVED_MERGED = "Approved and merged into {base} ({commit}). The task moved to Done."
BRANCH_DISCARDED = "Branch {branch} deleted."

# The stepper, in pipeline order: (key, label). Reviewing and fixing share a step.
STEPS: tuple[tuple[str, str], ...] = (
    (RunStatus.QUEUED, "Queued"),
    (RunStatus.PLANNING, "Planning"),
    (RunStatus.CODING, "Coding"),
    (RunStatus.VERIFYING, "Testing"),
    (RunStatus.REVIEWING, "Reviewing"),
    (RunStatus.AWAITING_APPROVAL, "Awaiting approval"),
    (RunStatus.APPROVED, "Approved"),
)
# Steps that share another's place: fixing is shown in the review step.
STEP_ALIASES: dict[str, str] = {RunStatus.FIXING: RunStatus.REVIEWING}
AGENT_FOR_PHASE: dict[str, str] = {
    RunStatus.PLANNING: "planner",
    RunStatus.CODING: "coder",
    RunStatus.FIXING: "coder",
    RunStatus.VERIFYING: "verifier",
    RunStatus.REVIEWING: "reviewer",
}
AGENT_INFO = {
    "planner": ("Planner", "Splits the task into subtasks"),
    "coder": ("Coder", "Writes the file changes"),
    "reviewer": ("Reviewer", "Checks the changes"),
    "verifier": ("Tests", "Runs the project's test command"),
}
# How a run's status reads at a glance: the colour family of its pill.
STATUS_TONE: dict[str, str] = {
    RunStatus.QUEUED: "neutral",
    **{status: "working" for status in WORKING_STATUSES},
    RunStatus.AWAITING_APPROVAL: "attention",
    RunStatus.PAUSED: "warning",
    RunStatus.APPROVED: "success",
    RunStatus.FAILED: "danger",
    RunStatus.CANCELLED: "neutral",
}


# --- Panel context ------------------------------------------------------------------------


def _steps(run: PipelineRun | None, stopped_in: str, *, with_tests: bool) -> list[dict[str, str]]:
    shown = [(key, label) for key, label in STEPS if with_tests or key != RunStatus.VERIFYING]
    index_of = {str(key): index for index, (key, _) in enumerate(shown)}

    def step_of(status: str, default: int) -> int:
        return index_of.get(STEP_ALIASES.get(status, status), default)

    if run is None:
        at, mark = -1, "upcoming"
    elif run.status == RunStatus.PAUSED:
        at, mark = step_of(run.phase, 1), "paused"
    elif run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        at, mark = step_of(stopped_in, 0), str(run.status)
    elif run.status == RunStatus.APPROVED:
        at, mark = len(shown) - 1, "done"
    else:
        at, mark = step_of(run.status, 0), "current"
    fixing = run is not None and (
        run.status == RunStatus.FIXING or (run.status != RunStatus.REVIEWING and run.phase == RunStatus.FIXING)
    )
    steps = []
    for index, (key, label) in enumerate(shown):
        if key == RunStatus.REVIEWING and fixing and index == at:
            label = "Fixing"
        state = "done" if index < at else mark if index == at else "upcoming"
        steps.append({"key": str(key), "label": label, "state": state})
    return steps


def _iteration_label(run: PipelineRun) -> str:
    status = run.phase if run.status == RunStatus.PAUSED else run.status
    if status == RunStatus.REVIEWING:
        return f"Review {run.iteration + 1} of {MAX_REVIEW_ITERATIONS}"
    if status == RunStatus.FIXING:
        return f"Fixing after review {run.iteration} of {MAX_REVIEW_ITERATIONS}"
    if run.iteration:
        return f"Review {run.iteration} of {MAX_REVIEW_ITERATIONS}"
    return ""


def _reviews(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The review history, newest first. Requested changes restart the numbering, so
    each review also says which round of feedback it belongs to."""
    reviews: list[dict[str, Any]] = []
    feedback_round, previous = 0, 0
    for entry in history:
        if not isinstance(entry, dict):
            continue
        value = entry.get("iteration")
        iteration = value if isinstance(value, int) else previous + 1
        if iteration <= previous:
            feedback_round += 1
        previous = iteration
        findings = [finding for finding in entry.get("findings") or [] if isinstance(finding, dict)]
        reviews.append(
            {
                "iteration": iteration,
                "pass": bool(entry.get("pass")),
                "findings": findings,
                "after_feedback": feedback_round,
            }
        )
    return reviews[::-1]


def _needs_key() -> bool:
    return settings.LLM_PROVIDER == "anthropic" and not settings.ANTHROPIC_API_KEY and not settings.LLM_DEMO_MODE


def _pane_state(agent: str, active_agent: str, focus_agent: str, run: PipelineRun | None, segments: list[Any]) -> str:
    if agent == active_agent:
        return "streaming"
    if run and agent == focus_agent and run.status in (RunStatus.PAUSED, RunStatus.FAILED):
        return str(run.status)
    return "done" if any(segment.text for segment in segments) else "waiting"


def panel_context(*, task: Task, partial: bool = False) -> dict[str, Any]:
    """Everything the pipeline panel shows for the task's latest run.

    The transcript (log panes) is read first, so that anything newer than the
    ``last_event_id`` it carries reaches the page through the socket's replay. A
    ``partial`` refresh leaves the log panes alone and does not read it.
    """
    transcript = None if partial else run_transcript_for_task(task=task)
    run = run_latest_for_task(task=task)
    actions = run_allowed_actions(run=run) if run else []
    stopped_in = run_stopped_in(run=run) if run and run.status in (RunStatus.FAILED, RunStatus.CANCELLED) else ""
    active_agent = AGENT_FOR_PHASE.get(run.status, "") if run else ""
    # The pane worth reading first: the working agent's, or the one that was working when
    # the run paused or failed.
    focus_agent = active_agent
    if run and run.status in (RunStatus.PAUSED, RunStatus.FAILED):
        focus_agent = AGENT_FOR_PHASE.get(stopped_in if run.status == RunStatus.FAILED else run.phase, "")
    diff = (
        run_diff(run=run) if run and (run.file_changes or (run.branch and run.head_commit != run.base_commit)) else None
    )
    totals = run_totals_for_task(task=task) if run and run.number > 1 else None
    repository = getattr(task.project, "repository", None)
    with_tests = bool((run and run.verify_result) or (repository and repository.test_command.strip()))
    logs = []
    if transcript is not None:
        for agent in LOG_AGENTS:
            if agent == "verifier" and not with_tests:
                continue
            name, role = AGENT_INFO[agent]
            segments = transcript.agents.get(agent, [])
            logs.append(
                {
                    "agent": agent,
                    "name": name,
                    "role": role,
                    "segments": segments,
                    "has_text": any(segment.text for segment in segments),
                    "active": agent == active_agent,
                    "open": agent == focus_agent,
                    "state": _pane_state(agent, active_agent, focus_agent, run, segments),
                }
            )
    return {
        "task": task,
        "run": run,
        "actions": actions,
        "can_start": run is None or run.status == RunStatus.APPROVED,
        "steps": _steps(run, stopped_in, with_tests=with_tests),
        "with_tests": with_tests,
        "repository": repository,
        "status_tone": STATUS_TONE.get(run.status, "neutral") if run else "neutral",
        "iteration_label": _iteration_label(run) if run else "",
        "active_agent": active_agent,
        "focus_agent": focus_agent,
        "is_working": bool(run and run.status in WORKING_STATUSES),
        "reviews": _reviews(run.review_history) if run and isinstance(run.review_history, list) else [],
        "diff": diff,
        "totals": totals,
        "logs": logs,
        "last_event_id": transcript.last_event_id if transcript is not None else 0,
        "phase_event_id": transcript.phase_event_id if transcript is not None else 0,
        "phase_label": transcript.phase_label if transcript is not None else "",
        "max_reviews": MAX_REVIEW_ITERATIONS,
        "demo_mode": settings.LLM_DEMO_MODE,
        "needs_key": _needs_key(),
        "start_form": StartRunForm(),
        "feedback_form": RequestChangesForm(),
        "partial": partial,
    }


# --- Views --------------------------------------------------------------------------------


def _respond(request: HttpRequest, task: Task) -> HttpResponse:
    """Back to the task page, or (htmx) the refreshed panel."""
    if request.htmx:  # type: ignore[attr-defined]
        task.refresh_from_db()  # the action may have moved it to another column
        response = render(request, "pipelines/_refresh.html", panel_context(task=task, partial=True))
    else:
        response = redirect(reverse("tasks:detail", args=[task.pk]) + "#pipeline")
    patch_vary_headers(response, ["HX-Request"])
    return response


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


def _form_error(form: StartRunForm | RequestChangesForm) -> str:
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
        services.run_request_changes(run=run, feedback=form.cleaned_data["feedback"], actor=request_user(request))
        return CHANGES_REQUESTED

    return _act(request, run.task, request_changes)


@login_required
@require_POST
def run_approve(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)

    def approve() -> str:
        approved = services.run_approve(run=run, actor=request_user(request))
        merge = approved.merge_result or {}
        if merge.get("merged"):
            return RUN_APPROVED_MERGED.format(
                base=merge.get("base_branch") or "the base branch", commit=merge["commit"][:10]
            )
        return RUN_APPROVED

    return _act(request, run.task, approve)


@login_required
@require_GET
def run_patch(request: HttpRequest, run_id: int) -> HttpResponse:
    from .api.views import patch_response

    return patch_response(run_get_for_user(user=request_user(request), run_id=run_id))


@login_required
@require_POST
def run_discard_branch(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request_user(request), run_id=run_id)

    def discard() -> str:
        services.run_discard_branch(run=run, actor=request_user(request))
        return BRANCH_DISCARDED.format(branch=run.branch)

    return _act(request, run.task, discard)
