"""The task page's pipeline panel: everything it shows for a task's latest run.

Used by the ``{% run_panel task %}`` tag (the task page) and by pipelines.views (the
htmx refreshes of the panel).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse

from llm.pricing import price_known
from pipelines.forms import RequestChangesForm, StartRunForm
from pipelines.messages.selectors import run_messages_for_run
from pipelines.models import (
    ACTIVE_STATUSES,
    MAX_REVIEW_ITERATIONS,
    WORKING_STATUSES,
    ForgeReview,
    ForgeReviewOutcome,
    LineCommentAddressed,
    PipelineRun,
    PullRequest,
    RunLineComment,
    RunStatus,
)
from pipelines.review.selectors import line_comments_for_run, run_diff
from pipelines.review.services import LINE_COMMENT_BODY_MAX_LENGTH
from pipelines.runs.base_update import run_base_updates_shown
from pipelines.runs.ceiling import task_spend_against_ceiling
from pipelines.runs.places import queue_place_label, run_queue_position, runs_waiting
from pipelines.runs.selectors import (
    AGENT_FOR_PHASE,
    LOG_AGENTS,
    run_allowed_actions,
    run_latest_for_task,
    run_recalled,
    run_stopped_in,
    run_subtask_index,
    run_totals_for_task,
    run_transcript_for_task,
)
from repos.forges import PullRequestState
from tasks.models import Task

# The stepper, in pipeline order: (key, label). Reviewing and fixing share a step.
STEPS: tuple[tuple[str, str], ...] = (
    (RunStatus.QUEUED, "Queued"),
    (RunStatus.PLANNING, "Planning"),
    (RunStatus.PREPARING, "Environment"),
    (RunStatus.CODING, "Coding"),
    (RunStatus.VERIFYING, "Testing"),
    (RunStatus.REVIEWING, "Reviewing"),
    (RunStatus.AWAITING_APPROVAL, "Awaiting approval"),
    (RunStatus.APPROVED, "Approved"),
)
# Steps that share another's place: fixing is shown in the review step.
STEP_ALIASES: dict[str, str] = {RunStatus.FIXING: RunStatus.REVIEWING}
AGENT_INFO = {
    "planner": ("Planner", "Splits the task into subtasks"),
    "environment": ("Environment", "Prepares the checkout's environment and runs the tests on the base"),
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


def _steps(
    run: PipelineRun | None, stopped_in: str, *, with_tests: bool, with_environment: bool
) -> list[dict[str, str]]:
    shown = [
        (key, label)
        for key, label in STEPS
        if (with_tests or key != RunStatus.VERIFYING) and (with_environment or key != RunStatus.PREPARING)
    ]
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


def _subtasks(run: PipelineRun | None) -> list[dict[str, Any]]:
    """The plan's subtasks as the panel lists them. While the Coder works (coding or
    fixing) and has said which subtask it is on, that one is ``current`` and the ones
    before it ``done``; otherwise none is marked (``state`` "")."""
    if run is None or not isinstance(run.plan, list):
        return []
    at = None
    if run.status in (RunStatus.CODING, RunStatus.FIXING) and run.current_subtask is not None:
        at = run_subtask_index(run=run, order=run.current_subtask)
    subtasks = []
    for index, subtask in enumerate(run.plan):
        if isinstance(subtask, dict):
            title, description = subtask.get("title") or "", subtask.get("description") or ""
        else:
            title, description = str(subtask), ""
        state = "" if at is None else "done" if index < at else "current" if index == at else "upcoming"
        subtasks.append({"title": title, "description": description, "state": state})
    return subtasks


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
                # Counted over the whole run: a request for changes restarts the fix
                # rounds' count (``iteration``), not the reviews' numbers a person reads.
                "number": len(reviews) + 1,
                "pass": bool(entry.get("pass")),
                "findings": findings,
                "after_feedback": feedback_round,
            }
        )
    return reviews[::-1]


def _line_comment_rounds(comments: list[RunLineComment], reviews: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sent line comments by the request for changes that carried them, newest
    first, each round with the reviews that followed it (oldest first), and each comment
    with what the round did about it (``_addressed``)."""
    rounds: dict[int, list[RunLineComment]] = {}
    for comment in comments:
        if comment.feedback_round is not None:
            rounds.setdefault(comment.feedback_round, []).append(comment)
    shown = []
    for number in sorted(rounds, reverse=True):
        round_reviews = [review for review in reversed(reviews) if review["after_feedback"] == number]
        shown.append(
            {
                "round": number,
                "comments": [
                    {"comment": comment, **_addressed(comment, number, reviewed=bool(round_reviews))}
                    for comment in rounds[number]
                ],
                "reviews": round_reviews,
            }
        )
    return shown


def _addressed(comment: RunLineComment, feedback_round: int, *, reviewed: bool) -> dict[str, str]:
    """What the panel says the Coder's round did about a comment: only what git found
    (``RunLineComment.addressed``) and what the Coder said (``reply``), never that a
    review followed. ``outcome`` '' while the round has not been judged."""
    if comment.addressed == LineCommentAddressed.CHANGED:
        outcome = f"Changed in round {feedback_round}"
    elif comment.addressed == LineCommentAddressed.EXPLAINED:
        outcome = "Not changed"
    elif comment.addressed == LineCommentAddressed.UNCHANGED:
        outcome = f"Not changed in round {feedback_round}"
    elif reviewed:
        # Sent before rounds were checked, or git could not compare its file.
        return {"addressed": "unknown", "outcome": "Not checked against the round's changes", "reply": ""}
    else:
        return {"addressed": "", "outcome": "", "reply": ""}
    return {"addressed": comment.addressed, "outcome": outcome, "reply": comment.reply}


def _pending_by_line(comments: list[RunLineComment]) -> dict[str, dict[tuple[str, int], list[RunLineComment]]]:
    """Pending comments as the diff places them: under the last line they are about, on
    its side (a removed line's number is the old file's)."""
    placed: dict[str, dict[tuple[str, int], list[RunLineComment]]] = {}
    for comment in comments:
        if comment.feedback_round is None:
            placed.setdefault(comment.path, {}).setdefault((comment.side, comment.line_end), []).append(comment)
    return placed


def _recalled(run: PipelineRun) -> list[dict[str, Any]]:
    """What each agent of the run was given from memory, named as on the panes, each
    memory with a link to the run it came from."""
    entries = []
    for entry in run_recalled(run=run):
        memories = [
            {
                **memory,
                "source_url": reverse("pipelines:run-lineage", kwargs={"run_id": memory["source_run_id"]})
                if memory.get("source_run_id")
                else "",
            }
            for memory in entry["memories"]
        ]
        entries.append({**entry, "memories": memories, "name": AGENT_INFO.get(entry["agent"], (entry["agent"], ""))[0]})
    return entries


LESSON_LABELS = {
    "feedback": "From the request for changes",
    "findings": "From the review findings a fix round fixed",
    "approval": "On approval",
    "agent": "Written by the agent itself",
}


def _lessons(run: PipelineRun) -> list[dict[str, Any]]:
    """What the run taught, moment by moment; a lesson stored for several agents once."""
    shown = []
    for entry in run.lessons if isinstance(run.lessons, list) else []:
        if not isinstance(entry, dict):
            continue
        lessons: dict[str, dict[str, Any]] = {}
        for memory in entry.get("memories") or []:
            if not isinstance(memory, dict) or not memory.get("content"):
                continue
            lesson = lessons.setdefault(memory["content"], {"content": memory["content"], "agents": [], "how": ""})
            lesson["agents"].append(AGENT_INFO.get(memory.get("agent", ""), (memory.get("agent") or "team", ""))[0])
            lesson["how"] = lesson["how"] or memory.get("how", "")
        shown.append(
            {
                "kind": entry.get("kind", ""),
                "label": LESSON_LABELS.get(entry.get("kind", ""), "Learned"),
                "distilled": bool(entry.get("distilled")),
                "lessons": list(lessons.values()),
                "note": entry.get("note", ""),
            }
        )
    return shown


def _needs_key(task: Task) -> bool:
    """Whether the Start form asks for an Anthropic key: the task's project runs on
    Anthropic (its own choice, or the server's) and the server has none."""
    provider = task.project.llm_provider or settings.LLM_PROVIDER
    return provider == "anthropic" and not settings.ANTHROPIC_API_KEY and not settings.LLM_DEMO_MODE


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
    # A run whose Coder changed nothing is told apart: there is no diff to read, no pull
    # request to open, and approving it merges nothing.
    changed_nothing = bool(
        run and run.status in (RunStatus.AWAITING_APPROVAL, RunStatus.APPROVED) and not (diff and diff.files)
    )
    totals = run_totals_for_task(task=task) if run and run.number > 1 else None
    reviews = _reviews(run.review_history) if run and isinstance(run.review_history, list) else []
    line_comments = list(line_comments_for_run(run=run)) if run else []
    can_comment = bool(diff and run and run.status == RunStatus.AWAITING_APPROVAL)
    pending_comments = [comment for comment in line_comments if comment.feedback_round is None] if can_comment else []
    repository = getattr(task.project, "repository", None)
    with_tests = bool((run and run.verify_result) or (repository and repository.test_command.strip()))
    # The environment step: runs that prepared one, or are preparing (or stopped there).
    with_environment = bool(run and (run.environment or RunStatus.PREPARING in (run.status, run.phase, stopped_in)))
    logs = []
    if transcript is not None:
        for agent in LOG_AGENTS:
            if (agent == "verifier" and not with_tests) or (agent == "environment" and not with_environment):
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
    pull_request = PullRequest.objects.filter(run=run).select_related("merge_when_green_by").first() if run else None
    return {
        "task": task,
        "run": run,
        "actions": actions,
        "can_start": run is None or run.status == RunStatus.APPROVED,
        "steps": _steps(run, stopped_in, with_tests=with_tests, with_environment=with_environment),
        "with_tests": with_tests,
        "repository": repository,
        "pull_request": pull_request,
        # Reviews on the forge whose authors are not trusted: shown, never acted on.
        "forge_reviews_not_acted": list(
            ForgeReview.objects.filter(pull_request=pull_request, outcome=ForgeReviewOutcome.UNTRUSTED)
        )
        if pull_request
        else [],
        # The repository merges when green, and no one asked yet (pipelines.pull_requests.merging).
        "can_merge_when_green": bool(
            pull_request
            and pull_request.state == PullRequestState.OPEN
            and pull_request.merge_when_green_at is None
            and run
            and run.status == RunStatus.AWAITING_APPROVAL
            and repository
            and repository.merge_when_green
        ),
        "changed_nothing": changed_nothing,
        "run_messages": list(run_messages_for_run(run=run)) if run else [],
        "can_message": bool(run and run.status in ACTIVE_STATUSES),
        "can_open_pull_request": bool(
            not changed_nothing
            and run
            and run.status == RunStatus.AWAITING_APPROVAL
            and run.branch
            and repository
            and repository.forge_configured
        ),
        "status_tone": STATUS_TONE.get(run.status, "neutral") if run else "neutral",
        "iteration_label": _iteration_label(run) if run else "",
        "active_agent": active_agent,
        "focus_agent": focus_agent,
        "is_working": bool(run and run.status in WORKING_STATUSES),
        "queue_place": queue_place_label(run_queue_position(run_id=run.pk))
        if run and run.status == RunStatus.QUEUED
        else "",
        # Queued over a limit on runs at once (not merely not picked up yet).
        "waiting_for_place": bool(run and run.status == RunStatus.QUEUED and runs_waiting(run_ids=[run.pk])),
        "subtasks": _subtasks(run),
        "reviews": reviews,
        "can_comment": can_comment,
        "pending_comments": pending_comments,
        "pending_by_line": _pending_by_line(pending_comments),
        "line_comment_rounds": _line_comment_rounds(line_comments, reviews),
        "line_comment_max_length": LINE_COMMENT_BODY_MAX_LENGTH,
        "recalled": _recalled(run) if run else [],
        "lessons": _lessons(run) if run else [],
        "diff": diff,
        "base_updates": run_base_updates_shown(run) if run and run.base_updates else [],
        "totals": totals,
        "task_spend": task_spend_against_ceiling(task_id=task.pk) if run else None,
        "logs": logs,
        "last_event_id": transcript.last_event_id if transcript is not None else 0,
        "phase_event_id": transcript.phase_event_id if transcript is not None else 0,
        "phase_label": transcript.phase_label if transcript is not None else "",
        "max_reviews": MAX_REVIEW_ITERATIONS,
        "demo_mode": settings.LLM_DEMO_MODE,
        # A model the price table does not know is priced at a fallback: say so (a local
        # endpoint's calls cost nothing, so there is nothing to estimate).
        "cost_estimated": bool(run and run.cost_usd and not price_known(model=run.model, provider=run.provider)),
        "needs_key": _needs_key(task),
        "start_form": StartRunForm(),
        "feedback_form": RequestChangesForm(),
        "partial": partial,
    }
