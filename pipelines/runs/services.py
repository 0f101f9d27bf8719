"""Pipeline runs: start, the one service that changes a run's status, the
person's actions (cancel, retry, request changes, approve), and what runs cost.

A run's status changes only in ``run_transition``: a compare-and-set update from the
status the caller saw, along RUN_TRANSITIONS, with its audit row, the task's column
and the live events in the same transaction (events are sent on commit).
"""

from __future__ import annotations

import functools
import logging
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F, Max, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.coder_agents import chosen_coder_agent
from core.crypto import encrypt_secret
from core.exceptions import ApplicationError, Conflict, InvalidTransition
from core.jobs import enqueue
from llm.providers import ANTHROPIC, OPENAI, provider_default_model
from pipelines.events import PipelineComplete, RunError, SubtaskChange, TaskStatusChange, event_publish
from pipelines.models import (
    ACTIVE_STATUSES,
    CODER,
    FINAL_STATUSES,
    PLANNER,
    REVIEWER,
    RUN_TRANSITIONS,
    WORKING_STATUSES,
    PipelineRun,
    RunStatus,
    RunTransition,
)
from pipelines.runs.card import card_column, pipeline_state
from pipelines.runs.ceiling import spend_ceiling_check
from pipelines.runs.places import run_places, runs_free_to_start
from pipelines.runs.selectors import run_phase_change_event, run_subtask_index
from projects.selectors import project_llm
from tasks.models import Task
from tasks.services import task_move

if TYPE_CHECKING:
    from accounts.models import User

logger = logging.getLogger(__name__)

RUN_ALREADY_ACTIVE = "This task already has an active run. Cancel it or wait for it to finish."
NO_API_KEY = (
    "No Anthropic API key is configured. Set ANTHROPIC_API_KEY on the server, or send your key "
    "with the request (X-Anthropic-Key header), or try `make demo` to watch a scripted run."
)
NOTHING_TO_RETRY = "Only a paused, failed, cancelled or finished run can be retried."
BROKER_DOWN = "The job queue is not reachable right now, so the run was not started. Try again in a moment."
NO_BRANCH = "This run has no branch to discard."
BRANCH_IN_USE = "Cancel the run before discarding its branch."


# A start that collides with runs ending as fast as they start tries again this often.
START_ATTEMPTS = 3


class RunActive(Conflict):
    code = "run_active"


class MissingApiKey(ApplicationError):
    code = "missing_api_key"


class StaleRun(ApplicationError):
    """Someone else changed the run first (compare-and-set found another status)."""

    code = "stale_run"
    status_code = 409


class QueueUnavailable(ApplicationError):
    code = "queue_unavailable"
    status_code = 503


def _enqueue_advance(run_id: int) -> None:
    enqueue("pipelines.tasks.pipeline_advance", run_id)


def _enqueue_advance_or_leave_to_sweeper(run_id: int, status: str) -> None:
    """After a committed transition, with the broker down, the transition stands: the
    beat sweeper queues the phase once the broker is back."""
    try:
        _enqueue_advance(run_id)
    except Exception as exc:  # noqa: BLE001 - whatever the broker raised, the sweeper recovers the run
        logger.error(
            "Run %s: could not queue its %s phase (%s); the sweeper queues it again once the broker answers",
            run_id,
            status,
            exc,
        )


def _start_waiting_runs(owner_id: int) -> None:
    """After a run of the owner left a working status (or the queue): queue the runs that
    may start now — the owner's, or with places (``run_places``: the embedded worker's
    threads) everyone's, since the freed place may be another user's turn. Their jobs
    decide again under the lock (``run_begin``); a job lost here is the sweeper's (a run
    free to start counts as needing a worker)."""
    try:
        run_ids = runs_free_to_start(owner_id=None if run_places() else owner_id)
    except Exception as exc:  # noqa: BLE001 - the transition committed; the sweeper starts them later
        logger.error("Could not look for waiting runs of user %s (%s); the sweeper will", owner_id, exc)
        return
    for run_id in run_ids:
        _enqueue_advance_or_leave_to_sweeper(run_id, RunStatus.QUEUED)


def run_transition(
    *,
    run: PipelineRun,
    to_status: str,
    reason: str = "",
    actor: User | None = None,
    fields: dict[str, Any] | None = None,
    enqueue: bool = True,
    held_by: str | None = None,
) -> PipelineRun:
    """Move ``run`` from the status it has in memory to ``to_status``.

    Raises InvalidTransition if the table forbids it and StaleRun if the row's status
    is no longer the one the caller saw, or (``held_by``, a worker ending its phase) if
    that lease no longer holds the run. ``fields`` are saved in the same update.
    Entering a working status queues the phase's Celery task on commit. A run that
    ends forgets the API key it was started with, in the same update.
    """
    from_status = run.status
    if to_status not in RUN_TRANSITIONS[from_status]:
        allowed = sorted(RUN_TRANSITIONS[from_status])
        raise InvalidTransition(
            f"A run that is {from_status} cannot become {to_status}.", extra={"allowed": [str(s) for s in allowed]}
        )
    now = timezone.now()
    changes: dict[str, Any] = {**(fields or {}), "status": to_status, "updated_at": now}
    # The Coder names its subtask anew in every coding phase (run_subtask_start).
    changes.setdefault("current_subtask", None)
    if to_status in WORKING_STATUSES:
        changes["phase"] = to_status
    if from_status == RunStatus.QUEUED and to_status == RunStatus.PLANNING:
        changes["started_at"] = now
    if to_status in FINAL_STATUSES:
        changes["finished_at"] = now
        # Nothing can use the key any more: Retry of an ended run starts a new run,
        # with a key given anew. A paused run keeps its key for its Retry.
        changes["api_key_encrypted"] = ""
    # A lease is a claim on one phase: the next phase starts unclaimed. Its job is
    # queued on commit and may start on another worker thread before the finishing
    # phase has released its lease; a lease carried over would turn that job away and
    # stall the run until the lease ran out and the sweeper came by.
    changes["lease_owner"] = ""
    changes["lease_expires_at"] = None
    # Why a run paused holds only while it is paused (environment broken, spend ceiling).
    changes.setdefault("pause_kind", "")
    if to_status in (RunStatus.PAUSED, RunStatus.FAILED):
        changes.setdefault("error_retryable", to_status == RunStatus.PAUSED)
    elif to_status in WORKING_STATUSES or to_status == RunStatus.AWAITING_APPROVAL:
        changes.setdefault("error", "")
        changes.setdefault("error_retryable", False)

    rows = PipelineRun.objects.filter(pk=run.pk, status=from_status)
    if held_by is not None:
        # A worker that lost its lease (stalled past it, say) and wakes up must not end
        # the phase that another worker now executes.
        rows = rows.filter(lease_owner=held_by)
    with transaction.atomic():
        updated = rows.update(**changes)
        if updated == 0:
            raise StaleRun(f"The run changed meanwhile (it is no longer {from_status}).")
        for name, value in changes.items():
            setattr(run, name, value)
        RunTransition.objects.create(
            run=run, from_status=from_status, to_status=to_status, reason=reason[:500], actor=actor
        )
        task = Task.objects.select_related("project").get(pk=run.task_id)
        column = card_column(run=run, from_status=from_status, to_status=to_status, card_column=task.status)
        if column and task.status != column:
            previous = task.status
            task_move(task=task, status=column, by_pipeline=True, actor=actor, reason=f"run {run.number}: {to_status}")
            event_publish(
                task=task, run=run, event=TaskStatusChange(task_id=task.pk, new_status=column, old_status=previous)
            )
        # Read under the row lock the update took: the in-memory cost may be behind the
        # worker's latest call (a person's cancel holds a copy read before it).
        run.cost_usd = PipelineRun.objects.filter(pk=run.pk).values_list("cost_usd", flat=True).get()
        Task.objects.filter(pk=task.pk).update(pipeline_state=pipeline_state(run))
        event_publish(task=task, run=run, event=run_phase_change_event(run=run))
        if to_status in (RunStatus.PAUSED, RunStatus.FAILED) and run.error:
            event_publish(
                task=task,
                run=run,
                event=RunError(
                    type="paused" if to_status == RunStatus.PAUSED else "failed",
                    message=run.error,
                    retryable=to_status == RunStatus.PAUSED,
                ),
            )
        if to_status in (RunStatus.AWAITING_APPROVAL, RunStatus.FAILED):
            event_publish(
                task=task,
                run=run,
                event=PipelineComplete(
                    task_id=task.pk,
                    result="passed" if to_status == RunStatus.AWAITING_APPROVAL else "failed",
                    run_id=run.pk,
                ),
            )
        if enqueue and to_status in WORKING_STATUSES:
            transaction.on_commit(functools.partial(_enqueue_advance_or_leave_to_sweeper, run.pk, to_status))
        if from_status in (RunStatus.QUEUED, *WORKING_STATUSES) and to_status not in WORKING_STATUSES:
            # A place (or a place in line) came free: waiting runs may start.
            transaction.on_commit(functools.partial(_start_waiting_runs, task.project.owner_id))
    return run


def run_begin(*, run: PipelineRun) -> bool:
    """Queued → planning, if starting the run keeps its owner and its project within
    their runs at once, and the run's turn has come among all users' for the places
    (pipelines/runs/places.py); False, the run left untouched, when it must wait (or is no
    longer queued). The check and the transition hold the owner's row locked (and with
    places a lock every start takes), so two runs starting at once cannot both take the
    last place.
    Raises StaleRun if the run left the queue between the check and the transition."""
    owner_id = Task.objects.filter(pk=run.task_id).values_list("project__owner_id", flat=True).get()
    with transaction.atomic():
        # FOR NO KEY UPDATE: two starts of one owner still wait for each other, but the
        # key-share lock that inserting a row pointing at the user takes (a transition's
        # actor, in a cancel holding its run's row) does not wait: with FOR UPDATE, a cancel
        # and a start deadlocked (pipelines/tests/runs/test_hammer.py on PostgreSQL).
        users = get_user_model().objects.select_for_update(no_key=True)
        if run_places():
            # Places are shared by all users: every start takes one lock first (the first
            # user's row, before the owner's: always in that order), so two users' runs
            # cannot both take the last place.
            users.order_by("pk").values_list("pk", flat=True).first()
        users.filter(pk=owner_id).values_list("pk", flat=True).first()
        if run.pk not in runs_free_to_start(owner_id=owner_id):
            return False
        run_transition(run=run, to_status=RunStatus.PLANNING, reason="picked up by a worker", enqueue=False)
    return True


def run_subtask_start(*, run: PipelineRun, order: int, held_by: str) -> PipelineRun:
    """The Coder begins the plan's subtask ``order``: the run says so, and the task page
    is told (``subtask-change``). Raises StaleRun if the run is no longer coding or
    fixing under the lease ``held_by``."""
    index = run_subtask_index(run=run, order=order)
    if index is None:
        raise ValueError(f"The plan has no subtask {order}.")
    with transaction.atomic():
        updated = PipelineRun.objects.filter(
            pk=run.pk, status__in=(RunStatus.CODING, RunStatus.FIXING), lease_owner=held_by
        ).update(current_subtask=order)
        if updated == 0:
            raise StaleRun("The run changed meanwhile (it is no longer coding under this lease).")
        run.current_subtask = order
        event_publish(
            task=run.task,
            run=run,
            event=SubtaskChange(
                run_id=run.pk,
                order=order,
                position=index + 1,
                count=len(run.plan),
                title=str(run.plan[index].get("title", "")),
            ),
        )
    return run


def _resolve_api_key(api_key: str | None, *, task: Task, provider: str) -> str:
    """The key a run will use, encrypted for storage ('' = the server's key): on an
    OpenAI-compatible endpoint the project's own key, if it saved one."""
    if provider == OPENAI:
        return project_llm(project=task.project).api_key_encrypted
    if provider != ANTHROPIC:
        return ""
    if api_key and api_key.strip():
        return encrypt_secret(api_key.strip())
    if settings.ANTHROPIC_API_KEY or settings.LLM_DEMO_MODE:
        return ""
    raise MissingApiKey(NO_API_KEY)


def _run_settings(task: Task) -> dict[str, Any]:
    """The provider, endpoint and model the run records and its calls use: the
    project's choice, else the server's."""
    project = task.project
    chosen = project_llm(project=project)
    provider = chosen.provider or settings.LLM_PROVIDER
    return {
        "provider": provider,
        "endpoint": chosen.base_url,
        "model": chosen.model or provider_default_model(provider),
        "agent_models": {
            agent: chosen
            for agent, chosen in (
                (PLANNER, project.planner_model),
                (CODER, project.coder_model),
                (REVIEWER, project.reviewer_model),
            )
            if chosen
        },
        "max_tokens": project.llm_max_tokens or settings.LLM_MAX_TOKENS,
        "token_budget": project.token_budget or settings.RUN_TOKEN_BUDGET,
        "coder_agent": chosen_coder_agent(task_choice=task.coder_agent, project_choice=project.coder_agent),
    }


def run_start(*, task: Task, user: User | None, api_key: str | None = None) -> PipelineRun:
    """Create a queued run for ``task`` and queue its first phase.

    Exactly one run per task can be active: the database's partial unique constraint
    decides between concurrent starts, the losers get RunActive (409). If the queue
    cannot take the job, the run is removed again and QueueUnavailable (503) raised.
    """
    options = _run_settings(task)
    encrypted_key = _resolve_api_key(api_key, task=task, provider=options["provider"])
    previous_state = task.pipeline_state
    for attempt in range(START_ATTEMPTS):
        try:
            with transaction.atomic():
                number = (PipelineRun.objects.filter(task=task).aggregate(last=Max("number"))["last"] or 0) + 1
                # The column as it is now, not as the caller saw it: a retry of a run
                # awaiting approval has just sent the card back (run_retry).
                column = Task.objects.filter(pk=task.pk).values_list("status", flat=True).get()
                run = PipelineRun.objects.create(
                    task=task,
                    number=number,
                    started_by=user,
                    api_key_encrypted=encrypted_key,
                    started_from_column=column,
                    **options,
                )
                RunTransition.objects.create(
                    run=run, from_status="", to_status=RunStatus.QUEUED, reason="started", actor=user
                )
                Task.objects.filter(pk=task.pk).update(
                    pipeline_state=pipeline_state(run),
                    total_cost=Coalesce(F("total_cost"), Value(Decimal(0))),  # None: never run
                )
                event_publish(task=task, run=run, event=run_phase_change_event(run=run))
            break
        except IntegrityError:
            # A concurrent start won (one active run per task, or the same run number).
            # Its run may have ended again before this check: then this start may go on,
            # with the next number.
            if (
                attempt == START_ATTEMPTS - 1
                or PipelineRun.objects.filter(task=task, status__in=ACTIVE_STATUSES).exists()
            ):
                raise RunActive(RUN_ALREADY_ACTIVE) from None
    try:
        _enqueue_advance(run.pk)
    except Exception as exc:
        logger.error("Could not queue run %s: %s", run.pk, exc)
        with transaction.atomic():
            run.delete()
            Task.objects.filter(pk=task.pk).update(pipeline_state=previous_state)
        raise QueueUnavailable(BROKER_DOWN) from exc
    return run


def run_cancel(*, run: PipelineRun, actor: User | None = None) -> PipelineRun:
    """Stop an active run. A worker streaming for it notices within a second."""
    for _ in range(3):
        if run.status not in ACTIVE_STATUSES:
            raise InvalidTransition(f"A run that is {run.status} cannot be cancelled.", extra={"allowed": []})
        try:
            return run_transition(run=run, to_status=RunStatus.CANCELLED, reason="cancelled by user", actor=actor)
        except StaleRun:
            run.refresh_from_db()
    raise StaleRun("The run keeps changing; try again.")


def run_retry(*, run: PipelineRun, actor: User | None = None, api_key: str | None = None) -> PipelineRun:
    """Paused → resume the same phase (SpendCeilingReached while the task is still at its
    spending ceiling: raise it first). Failed, cancelled or awaiting approval → a new
    run from planning (an awaiting run is cancelled first, in the same transaction)."""
    if run.status == RunStatus.PAUSED:
        # Still at the task's spending ceiling: the phase would only pause again.
        spend_ceiling_check(run)
        fields: dict[str, Any] = {"token_budget": _run_settings(run.task)["token_budget"]}
        if api_key:
            fields["api_key_encrypted"] = _resolve_api_key(api_key, task=run.task, provider=run.provider)
        return run_transition(run=run, to_status=run.phase, reason="resumed by user", actor=actor, fields=fields)
    if run.status == RunStatus.AWAITING_APPROVAL:
        # Two steps, not one transaction: run_start must see its job queued after its
        # own commit. Should the start fail, the old run stays cancelled and Retry on it
        # starts a new one.
        run_transition(run=run, to_status=RunStatus.CANCELLED, reason="superseded by a new run", actor=actor)
        return run_start(task=run.task, user=actor, api_key=api_key)
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        return run_start(task=run.task, user=actor, api_key=api_key)
    raise InvalidTransition(NOTHING_TO_RETRY, extra={"allowed": []})


def run_discard_branch(*, run: PipelineRun, actor: User | None = None) -> PipelineRun:
    """Remove a finished run's worktree and delete its branch, merged or not: the
    person's explicit choice (an unmerged branch is never deleted otherwise)."""
    from pipelines.runs.workspace import workspace_remove

    if not run.branch or run.branch_discarded_at:
        raise InvalidTransition(NO_BRANCH, extra={"allowed": []})
    if run.status in ACTIVE_STATUSES:
        raise InvalidTransition(BRANCH_IN_USE, extra={"allowed": []})
    workspace_remove(run, discard_branch=True)
    logger.info("Run %s: branch %s discarded by %s", run.pk, run.branch, actor)
    return run
