"""The pipeline phase by phase, driven in-process against the fake Anthropic server.

Each ``run_advance`` call executes one phase, as one Celery task would; the
end-to-end tests through a real worker are in test_worker_e2e.py.
"""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from llm.providers.anthropic import KEY_REJECTED
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus, RunTransition
from pipelines.phases import planning
from pipelines.phases.driver import run_advance
from pipelines.phases.reviewing import REVIEW_GAVE_UP
from pipelines.review.services import run_approve, run_request_changes
from pipelines.runs.leases import Lease, runs_needing_a_worker
from pipelines.runs.recovery import REPLY_REUSED
from pipelines.runs.services import run_cancel, run_retry, run_start, run_transition
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import (
    Hang,
    HttpError,
    MidStreamError,
    RawToolInputReply,
    TextReply,
    ToolReply,
    coder_creates,
    coder_replaces,
)
from tests.real_claude import real_claude
from tests.threads import DatabaseThread
from tests.workers import advance_until_the_worker_stops, drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
# The Coder edits the run's worktree (the project's own repository: it links none).
CODER = coder_creates("app/x.py", "x = 1\n")
FIX = coder_replaces("app/x.py", "x = 1", "x = 2")
NO_CHANGE = TextReply("It is right as it is.")
PASS = {"pass": True, "findings": []}
FAIL = {"pass": False, "findings": [{"file": "app/x.py", "line": 1, "severity": "major", "message": "x must be 2"}]}


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def test_pass_on_first_review(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN, text="Planning. "), *CODER, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.plan == PLAN["subtasks"]
    assert [(c["file_path"], c["action"], c["content"]) for c in run.file_changes] == [
        ("app/x.py", "create", "x = 1\n")
    ]
    assert run.branch and run.base_commit and run.head_commit != run.base_commit
    assert run.iteration == 1
    assert run.input_tokens > 0 and run.output_tokens > 0
    assert run.cost_usd > Decimal(0)
    task.refresh_from_db()
    assert task.status == "review"
    assert task.subtasks == PLAN["subtasks"]
    assert task.pipeline_state["status"] == RunStatus.AWAITING_APPROVAL
    agents = ["planner", "coder", "coder", "reviewer"]  # the Coder's two turns: create, then done
    assert list(AgentCall.objects.filter(run=run).values_list("agent", flat=True)) == agents
    statuses = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    assert statuses == ["queued", "planning", "coding", "reviewing", "awaiting_approval"]
    # The Planner and the Reviewer answer with their tool; the Coder edits with the editor.
    assert [r.answer_tool for r in fake_llm.requests] == ["submit_plan", None, None, "submit_review"]
    assert "str_replace_based_edit_tool" in fake_llm.requests[1].tool_names

    events = list(RunEvent.objects.filter(task=task).order_by("id"))
    types = [e.type for e in events]
    assert types[0] == "phase-change"
    assert "agent-log" in types
    assert types[-1] == "pipeline-complete"
    assert events[-1].data["result"] == "passed"
    planner_log = "".join(e.data["chunk"] for e in events if e.type == "agent-log" and e.data["agent"] == "planner")
    assert planner_log.startswith("Planning. ")
    columns = [e.data["new_status"] for e in events if e.type == "task-status"]
    assert columns == ["spec", "building", "review"]


def test_pass_after_fixes(fake_llm, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        *CODER,
        ToolReply(input=FAIL),
        *FIX,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.iteration == 2
    assert [entry["pass"] for entry in run.review_history] == [False, True]
    assert run.file_changes[0]["content"] == "x = 2\n"
    # The Coder saw the findings when fixing.
    fix_request = fake_llm.requests[4]
    assert fix_request.forced_tool is None
    assert "x must be 2" in fix_request.prompt_text
    statuses = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    assert statuses == ["queued", "planning", "coding", "reviewing", "fixing", "reviewing", "awaiting_approval"]


def test_fails_after_three_reviews(fake_llm, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        *CODER,
        ToolReply(input=FAIL),
        NO_CHANGE,
        ToolReply(input=FAIL),
        NO_CHANGE,
        ToolReply(input=FAIL),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert run.iteration == 3
    assert run.error == REVIEW_GAVE_UP.format(n=3)
    assert run.finished_at is not None
    complete = RunEvent.objects.filter(task=task, type="pipeline-complete").get()
    assert complete.data["result"] == "failed"
    task.refresh_from_db()
    assert task.status == "backlog", "back to the column the run was started from"


def test_transient_errors_are_retried_then_succeed(fake_llm, task, owner) -> None:
    fake_llm.script(
        HttpError(429, "rate_limit_error", headers={"retry-after": "0"}),
        MidStreamError("overloaded_error"),
        ToolReply(input=PLAN),
        *CODER,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert len(fake_llm.requests) == 6


def test_persistent_overload_pauses_and_retry_resumes_the_same_phase(fake_llm, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        *[HttpError(529, "overloaded_error") for _ in range(4)],
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.PAUSED
    assert run.phase == RunStatus.CODING
    assert run.error_retryable is True
    assert "overloaded" in run.error
    error = RunEvent.objects.filter(task=task, type="error").get()
    assert error.data["retryable"] is True
    assert error.data["message"] == run.error
    calls_before = AgentCall.objects.filter(run=run).count()

    fake_llm.script(*CODER, ToolReply(input=PASS))
    run = drive_in_process(run_retry(run=run, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.error == ""
    # The plan was not bought twice: planning ran once.
    assert AgentCall.objects.filter(run=run, agent="planner").count() == 1
    assert AgentCall.objects.filter(run=run).count() == calls_before + 3


def test_rejected_key_fails_with_a_message_saying_what_to_fix(fake_llm, task, owner) -> None:
    fake_llm.script(HttpError(401, "authentication_error"))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert run.error == KEY_REJECTED
    assert len(fake_llm.requests) == 1, "a rejected key is not retried"


def test_invalid_output_is_retried_once_with_the_errors(fake_llm, task, owner) -> None:
    fake_llm.script(
        ToolReply(input={"subtasks": [{"id": "s1"}]}),
        ToolReply(input=PLAN),
        *CODER,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert "'title' is a required property" in fake_llm.requests[1].prompt_text
    outcomes = list(AgentCall.objects.filter(run=run, agent="planner").values_list("outcome", flat=True))
    assert outcomes == ["invalid", "ok"]


def test_invalid_output_twice_fails_the_run(fake_llm, task, owner) -> None:
    fake_llm.script(RawToolInputReply(partial_json='{"subtasks": [1'), ToolReply(input={"nope": 1}))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert run.error.startswith("The planner gave invalid output twice")


def test_budget_pauses_before_spending_more(fake_llm, task, owner, settings) -> None:
    settings.RUN_TOKEN_BUDGET = 1000
    settings.LLM_MAX_TOKENS = 600
    fake_llm.script(ToolReply(input=PLAN, input_tokens=300, output_tokens=200))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.PAUSED
    assert run.phase == RunStatus.CODING
    assert "budget" in run.error
    assert len(fake_llm.requests) == 1


def test_request_changes_then_approve(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    # The project distils the request for changes into a lesson before the Coder starts.
    fake_llm.script(ToolReply(input={"lessons": []}), *FIX, ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=run, feedback="Please make it 2", actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert "Please make it 2" in fake_llm.requests[4].prompt_text
    assert fake_llm.requests[4].forced_tool == "record_lessons"
    assert "Please make it 2" in fake_llm.requests[5].prompt_text
    assert run.file_changes[0]["content"] == "x = 2\n"
    run = run_approve(run=run, actor=owner)
    assert run.status == RunStatus.APPROVED
    task.refresh_from_db()
    assert task.status == "done"


def test_retry_after_failure_starts_a_new_run(fake_llm, task, owner) -> None:
    fake_llm.script(HttpError(400, "invalid_request_error"))
    first = drive_in_process(run_start(task=task, user=owner))
    assert first.status == RunStatus.FAILED
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    second = drive_in_process(run_retry(run=first, actor=owner))
    assert second.pk != first.pk
    assert second.number == 2
    assert second.status == RunStatus.AWAITING_APPROVAL


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_a_streaming_call_within_a_second(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN, text="slow " * 400, chunk_size=5, chunk_delay=0.02))
    run = run_start(task=task, user=owner)

    worker = DatabaseThread(target=run_advance, kwargs={"run_id": run.pk})
    worker.start()
    deadline = time.monotonic() + 5
    while not RunEvent.objects.filter(task=task, type="agent-log").exists():
        assert time.monotonic() < deadline, "the stream never started"
        time.sleep(0.05)
    run.refresh_from_db()
    cancelled_at = time.monotonic()
    run_cancel(run=run, actor=owner)
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert time.monotonic() - cancelled_at < 1.5
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.plan == [], "output of a cancelled phase is dropped"
    assert run.lease_owner == ""


def test_a_leased_phase_is_not_run_twice_and_an_expired_lease_is_swept(fake_llm, task, owner) -> None:
    run = run_start(task=task, user=owner)
    fake_llm.script(ToolReply(input=PLAN))
    run_advance(run_id=run.pk)  # planning → coding
    run.refresh_from_db()
    assert run.status == RunStatus.CODING
    # A worker took the coding phase and died: its lease is still live.
    from datetime import timedelta

    from django.utils import timezone

    PipelineRun.objects.filter(pk=run.pk).update(
        lease_owner="dead-worker", lease_expires_at=timezone.now() + timedelta(seconds=60)
    )
    run_advance(run_id=run.pk)
    assert len(fake_llm.requests) == 1, "a live lease keeps other workers out"
    assert run.pk not in runs_needing_a_worker(grace_seconds=0)
    # The lease runs out: the sweeper finds the run, and the next worker finishes it.
    PipelineRun.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert run.pk in runs_needing_a_worker(grace_seconds=0)
    fake_llm.script(*CODER, ToolReply(input=PASS))
    run = drive_in_process(run)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert AgentCall.objects.filter(run=run, agent="planner").count() == 1


def test_the_next_phase_starts_even_before_the_finished_phase_lets_go_of_its_lease(fake_llm, task, owner) -> None:
    # The planning phase's transition queues the coding job on commit; a second worker
    # thread may take that job while the planning job is still on its way to releasing.
    run = run_transition(run=run_start(task=task, user=owner), to_status=RunStatus.PLANNING, enqueue=False)
    fake_llm.script(ToolReply(input=PLAN), *CODER)
    planning_lease = Lease(run)
    assert planning_lease.claim()
    planning.execute(run, planning_lease)  # ends with the move to coding; not released yet

    run_advance(run_id=run.pk)  # the coding job, on the other thread
    run.refresh_from_db()
    assert run.status == RunStatus.REVIEWING, "the planning phase's lease turned the coding job away"
    planning_lease.release()  # late, and it leaves the run alone
    assert PipelineRun.objects.get(pk=run.pk).status == RunStatus.REVIEWING


def test_a_phase_resumed_after_its_worker_stopped_reuses_the_calls_it_had_bought(fake_llm, task, owner) -> None:
    run = run_start(task=task, user=owner)
    # The Planner's first answer is invalid (a call bought all the same); the worker
    # stops while the corrected answer streams.
    fake_llm.script(ToolReply(input={"subtasks": [{"id": "s1"}]}), Hang(3))

    advance_until_the_worker_stops(run.pk, when=lambda: len(fake_llm.requests) >= 2)
    run.refresh_from_db()
    assert run.status == RunStatus.PLANNING
    # Handed straight to the sweeper: the lease left run out, not merely released.
    assert run.lease_owner == "" and run.lease_expires_at is not None
    assert run.pk in runs_needing_a_worker()
    assert list(AgentCall.objects.filter(run=run).values_list("outcome", flat=True)) == ["invalid"]

    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    run = drive_in_process(run)
    assert run.status == RunStatus.AWAITING_APPROVAL
    # The resumed phase asked only for the corrected answer: the invalid one was reused.
    assert len(fake_llm.requests) == 2 + 4
    assert "'title' is a required property" in fake_llm.requests[2].prompt_text
    assert [r.answer_tool for r in fake_llm.requests[2:]] == ["submit_plan", None, None, "submit_review"]
    calls = AgentCall.objects.filter(run=run)
    assert list(calls.values_list("agent", "attempt", "outcome")) == [
        ("planner", 1, "invalid"),
        ("planner", 2, "ok"),
        ("coder", 1, "ok"),
        ("coder", 1, "ok"),
        ("reviewer", 1, "ok"),
    ]
    # Each bought call is counted once in the run's cost.
    assert run.input_tokens == sum(
        call.input_tokens + call.cache_creation_input_tokens + call.cache_read_input_tokens for call in calls
    )
    assert run.output_tokens == sum(call.output_tokens for call in calls)
    log = "".join(e.data["chunk"] for e in RunEvent.objects.filter(run=run, type="agent-log").order_by("id"))
    assert REPLY_REUSED.strip() in log


def test_a_reply_is_reused_only_for_the_same_question(fake_llm, task, owner) -> None:
    run = run_transition(run=run_start(task=task, user=owner), to_status=RunStatus.PLANNING, enqueue=False)
    fake_llm.script(ToolReply(input=PLAN))
    run_advance(run_id=run.pk)
    # A later entry into planning (a Retry after a pause, say) is a new phase: the
    # replies of the earlier one are not its own.
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.PAUSED)
    run.refresh_from_db()
    run = run_transition(run=run, to_status=RunStatus.PLANNING, enqueue=False)
    fake_llm.script(ToolReply(input=PLAN))
    run_advance(run_id=run.pk)
    assert len(fake_llm.requests) == 2
    assert AgentCall.objects.filter(run=run, agent="planner").count() == 2


def test_a_whole_run_through_the_claude_cli_provider(task, owner, settings, fake_llm) -> None:
    """The real CLI (tools/claude-cli) as every agent, the demo model as its API."""
    settings.LLM_PROVIDER = "claude-cli"
    settings.CLAUDE_CLI_PATH = real_claude()
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.provider == "claude-cli"
    # The CLI edited the worktree of the project's own repository (it links none): the
    # demo Coder's feature and its test, written with the CLI's Write tool.
    assert sorted((c["file_path"], c["action"]) for c in run.file_changes) == [
        ("src/feature.py", "create"),
        ("tests/test_feature.py", "create"),
    ]
    assert run.branch and run.head_commit != run.base_commit
    # Every agent's call is recorded at the CLI's usage: Planner, Coder, Reviewer.
    calls = {call.agent: call for call in AgentCall.objects.filter(run=run)}
    assert {"planner", "coder", "reviewer"} <= set(calls)
    assert all(call.input_tokens + call.cache_creation_input_tokens > 0 for call in calls.values())
    assert run.input_tokens == sum(
        c.input_tokens + c.cache_creation_input_tokens + c.cache_read_input_tokens
        for c in AgentCall.objects.filter(run=run)
    )
