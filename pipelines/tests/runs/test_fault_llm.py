"""LLM faults end to end: the real Anthropic provider against the fake server, phase by
phase through ``run_advance`` (issue 5, "Faults").

Covered elsewhere and not repeated here (test_orchestrator.py): 529 overloaded until
the run pauses and Retry resumes the coding phase, a rejected key (401) failing the run
with KEY_REJECTED, broken tool JSON twice failing the run, a transient 429 and a
mid-stream error that are retried and then succeed.
"""

from __future__ import annotations

import pytest

from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus, RunTransition
from pipelines.runs.services import run_retry, run_start
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import EDITOR, Hang, HttpError, MidStreamError, Reply, ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}

# One more failure than the pipeline retries (LLM_RETRY_DELAYS has three delays).
STORM = 4


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def _requests_per_tool(fake_llm) -> dict[str, int]:
    """Requests by the tool that answers them (the Coder's: the editor)."""
    counts: dict[str, int] = {}
    for request in fake_llm.requests:
        tool = request.answer_tool or (EDITOR if EDITOR in request.tool_names else "?")
        counts[tool] = counts.get(tool, 0) + 1
    return counts


def _agent_log(task: Task, agent: str) -> str:
    events = RunEvent.objects.filter(task=task, type="agent-log").order_by("id")
    return "".join(event.data["chunk"] for event in events if event.data["agent"] == agent)


def _assert_paused_in_coding_then_retry_resumes_it(fake_llm, task: Task, owner, run: PipelineRun, why: str) -> None:
    assert run.status == RunStatus.PAUSED
    assert run.phase == RunStatus.CODING
    assert run.error_retryable is True
    assert why in run.error
    assert run.lease_owner == "" and run.lease_expires_at is None, "a paused run holds no lease"
    error = RunEvent.objects.filter(task=task, type="error").get()
    assert error.data == {**error.data, "type": "paused", "retryable": True, "message": run.error}
    assert _requests_per_tool(fake_llm) == {"submit_plan": 1, EDITOR: STORM}

    fake_llm.script(*CODER, ToolReply(input=PASS))
    run = drive_in_process(run_retry(run=run, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.error == ""
    # Retry resumed the same run in the same phase: the plan was bought once.
    assert PipelineRun.objects.filter(task=task).count() == 1
    assert _requests_per_tool(fake_llm) == {"submit_plan": 1, EDITOR: STORM + 2, "submit_review": 1}
    assert list(AgentCall.objects.filter(run=run).values_list("agent", "phase")) == [
        ("planner", "planning"),
        ("coder", "coding"),
        ("coder", "coding"),
        ("reviewer", "reviewing"),
    ]
    statuses = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    assert statuses == ["queued", "planning", "coding", "paused", "coding", "reviewing", "awaiting_approval"]


@pytest.mark.parametrize(
    ("failure", "why"),
    [
        pytest.param(HttpError(429, "rate_limit_error", headers={"retry-after": "0"}), "rate limit", id="429-storm"),
        pytest.param(MidStreamError("overloaded_error", after_chunks=1), "overloaded", id="mid-stream-error-storm"),
        pytest.param(HttpError(500, "api_error"), "failing (500)", id="500-storm"),
    ],
)
def test_a_storm_longer_than_the_retries_pauses_and_retry_resumes_the_same_phase(
    fake_llm, task, owner, failure: Reply, why: str
) -> None:
    fake_llm.script(ToolReply(input=PLAN), *[failure] * STORM)
    run = drive_in_process(run_start(task=task, user=owner))
    _assert_paused_in_coding_then_retry_resumes_it(fake_llm, task, owner, run, why)


@pytest.mark.parametrize(
    ("silence", "why"),
    [
        # Accepts the request and never sends the response headers.
        pytest.param(Hang(1.0), "did not answer in time", id="no-answer"),
        # Starts the stream, then stalls longer than the read timeout.
        pytest.param(
            ToolReply(
                name=EDITOR, input={"command": "view", "path": "."}, text="stalling " * 4, chunk_size=4, chunk_delay=1.0
            ),
            # Today "The connection … broke off: timed out"; with the provider patch of
            # the E2 report, "did not answer in time" like the silent server.
            "time",
            id="stalled-stream",
        ),
    ],
)
def test_a_silent_llm_times_out_is_retried_then_pauses(
    fake_llm, task, owner, settings, silence: Reply, why: str
) -> None:
    settings.LLM_TIMEOUT_SECONDS = 0.3
    fake_llm.script(ToolReply(input=PLAN), *[silence] * STORM)
    run = drive_in_process(run_start(task=task, user=owner))
    _assert_paused_in_coding_then_retry_resumes_it(fake_llm, task, owner, run, why)


def test_retry_after_is_honoured_and_capped(fake_llm, task, owner, settings) -> None:
    settings.LLM_RETRY_DELAYS = [0.01, 0.01, 0.01]
    settings.LLM_RETRY_AFTER_CAP_SECONDS = 0.3
    fake_llm.script(
        HttpError(429, "rate_limit_error", headers={"retry-after": "0.2"}),
        HttpError(429, "rate_limit_error", headers={"retry-after": "3600"}),
        HttpError(529, "overloaded_error", headers={"retry-after-ms": "150"}),
        ToolReply(input=PLAN),
        *CODER,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    log = _agent_log(task, "planner")
    # The server's wait when it asks for longer than the backoff; an hour is capped.
    assert "Retrying in 0.2 s." in log
    assert "Retrying in 0.3 s." in log
    assert "Retrying in 3600" not in log
    assert "Retrying in 0.15 s." in log
    assert _requests_per_tool(fake_llm) == {"submit_plan": 4, EDITOR: 2, "submit_review": 1}


def test_a_non_retryable_refusal_fails_at_once_without_retrying(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), HttpError(400, "invalid_request_error", message="prompt is too long"))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert run.error_retryable is False
    assert run.error.startswith("The Anthropic API refused the request:")
    assert "prompt is too long" in run.error
    assert _requests_per_tool(fake_llm) == {"submit_plan": 1, EDITOR: 1}
    error = RunEvent.objects.filter(task=task, type="error").get()
    assert error.data["retryable"] is False
    assert RunEvent.objects.filter(task=task, type="pipeline-complete").get().data["result"] == "failed"
