"""A worker SIGKILLed in each phase: the run resumes after a restart and completes, and
the phases done before the kill are not paid for twice (issue 5, "Faults").

The doomed worker is a process of its own running the phases as the Celery task does
(``run_advance`` in a loop), so that the kill is a real process death in both
topologies and leaves no unacknowledged message behind in a shared Redis. The worker
that takes over is the topology's real one: the embedded worker (SQLite run) or a
``celery worker`` process (PostgreSQL + Redis run), fed by the sweeper.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus, RunTransition
from pipelines.orchestrator import runs_needing_a_worker, runs_sweep
from pipelines.services import run_start
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply
from tests.workers import delete_queue, subprocess_env, topology_worker, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CHANGES = {"changes": [{"file_path": "app/x.py", "content": "x = 1\n", "action": "create"}]}
FIXED = {"changes": [{"file_path": "app/x.py", "content": "x = 2\n", "action": "create"}]}
FAIL = {"pass": False, "findings": [{"file": "app/x.py", "line": 1, "severity": "major", "message": "x must be 2"}]}
PASS = {"pass": True, "findings": []}
LEASE_SECONDS = 5  # the smallest PIPELINE_LEASE_SECONDS allows

# A phase runner in its own process: the code the pipeline_advance task runs, phase
# after phase, until the run needs no worker.
PHASE_RUNNER = """
import sys
import django

django.setup()
from pipelines.models import WORKING_STATUSES, PipelineRun, RunStatus
from pipelines.orchestrator import run_advance

run_id = int(sys.argv[1])
while PipelineRun.objects.get(pk=run_id).status in (RunStatus.QUEUED, *WORKING_STATUSES):
    run_advance(run_id=run_id)
"""


def _slow(reply_input: dict[str, Any]) -> ToolReply:
    # About a minute of streaming: the kill always lands mid-stream.
    return ToolReply(input=reply_input, text="slow " * 3000, chunk_size=5, chunk_delay=0.02)


# phase killed in → (agent streaming, replies before the kill, the killed reply, the
# replies after the restart, the calls a complete run records in order).
CASES: dict[str, tuple[str, list[ToolReply], ToolReply, list[ToolReply], list[tuple[str, str]]]] = {
    "planning": (
        "planner",
        [],
        _slow(PLAN),
        [ToolReply(input=PLAN), ToolReply(input=CHANGES), ToolReply(input=PASS)],
        [("planner", "planning"), ("coder", "coding"), ("reviewer", "reviewing")],
    ),
    "coding": (
        "coder",
        [ToolReply(input=PLAN)],
        _slow(CHANGES),
        [ToolReply(input=CHANGES), ToolReply(input=PASS)],
        [("planner", "planning"), ("coder", "coding"), ("reviewer", "reviewing")],
    ),
    "reviewing": (
        "reviewer",
        [ToolReply(input=PLAN), ToolReply(input=CHANGES)],
        _slow(PASS),
        [ToolReply(input=PASS)],
        [("planner", "planning"), ("coder", "coding"), ("reviewer", "reviewing")],
    ),
    "fixing": (
        "coder",
        [ToolReply(input=PLAN), ToolReply(input=CHANGES), ToolReply(input=FAIL)],
        _slow(FIXED),
        [ToolReply(input=FIXED), ToolReply(input=PASS)],
        [
            ("planner", "planning"),
            ("coder", "coding"),
            ("reviewer", "reviewing"),
            ("coder", "fixing"),
            ("reviewer", "reviewing"),
        ],
    ),
}
TOOL_OF_AGENT = {"planner": "submit_plan", "coder": "submit_changes", "reviewer": "submit_review"}


def _llm_env(fake_llm) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": fake_llm.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key",
        "PIPELINE_LEASE_SECONDS": str(LEASE_SECONDS),
    }


def _run_state(run_id: int) -> dict[str, Any]:
    return PipelineRun.objects.values("status", "phase", "lease_owner", "lease_expires_at").get(pk=run_id)


def _streaming_in_phase(run_id: int, phase: str, agent: str) -> bool:
    """The agent has streamed output since the run entered ``phase`` (its latest entry)."""
    run = PipelineRun.objects.get(pk=run_id)
    if run.status != phase:
        return False
    entered = RunEvent.objects.filter(run=run, type="phase-change", data__status=phase).latest("id")
    return RunEvent.objects.filter(run=run, type="agent-log", data__agent=agent, id__gt=entered.pk).exists()


@pytest.mark.parametrize("phase", list(CASES))
def test_a_worker_killed_mid_phase_is_resumed_and_earlier_phases_are_not_bought_again(
    phase: str, fake_llm, owner, project, tmp_path: Path
) -> None:
    agent, before, killed, after, calls = CASES[phase]
    task = TaskFactory(project=project, title="Add x", description="x should exist")
    fake_llm.script(*before, killed)
    run_id = run_start(task=task, user=owner).pk
    # Follow-up jobs the doomed runner queues go nowhere (with Redis: a queue nobody
    # reads, deleted below): only the sweeper may hand the run on.
    doomed_queue = f"autocoder-doomed-{uuid.uuid4().hex[:10]}"
    doomed = subprocess.Popen(
        [sys.executable, "-c", PHASE_RUNNER, str(run_id)],
        cwd=settings.BASE_DIR,
        env=subprocess_env(CELERY_QUEUE=doomed_queue, **_llm_env(fake_llm)),
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: _streaming_in_phase(run_id, phase, agent),
            timeout=30,
            why=lambda: f"run is {_run_state(run_id)}; runner exit code {doomed.poll()}",
        )
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(10)
    finally:
        if doomed.poll() is None:
            os.killpg(doomed.pid, signal.SIGKILL)
        if settings.REDIS_URL is not None:
            delete_queue(doomed_queue)

    # The stated state after the kill: still in the phase, held by the dead worker's
    # lease, so no other worker runs it twice meanwhile...
    state = _run_state(run_id)
    assert state["status"] == phase and state["phase"] == phase
    assert state["lease_owner"] and state["lease_expires_at"] is not None
    assert fake_llm.pending == 0, "the killed call was in flight"
    # ...and the killed call was not recorded as bought output.
    assert list(AgentCall.objects.filter(run_id=run_id).values_list("agent", "phase")) == calls[: len(before)]

    fake_llm.script(*after)
    with topology_worker(tmp_path / "worker.log", **_llm_env(fake_llm)):
        # Once the dead lease runs out the run needs a worker, and the sweeper (celery
        # beat, every 30 s in production) queues it again.
        wait_until(lambda: run_id in runs_sweep(grace_seconds=0), timeout=LEASE_SECONDS + 10)
        wait_until(
            lambda: _run_state(run_id)["status"] == RunStatus.AWAITING_APPROVAL,
            timeout=60,
            why=lambda: str(_run_state(run_id)),
        )

    run = PipelineRun.objects.get(pk=run_id)
    assert run.lease_owner == "" and run.lease_expires_at is None
    assert run_id not in runs_needing_a_worker(grace_seconds=0)
    # Each completed phase was bought once; only the killed call was made twice.
    assert list(AgentCall.objects.filter(run=run).values_list("agent", "phase")) == calls
    requests = Counter(request.forced_tool for request in fake_llm.requests)
    expected = Counter(TOOL_OF_AGENT[name] for name, _ in calls) + Counter({TOOL_OF_AGENT[agent]: 1})
    assert requests == expected
    # The audit trail: each phase entered once, as in a run that was never killed.
    path = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    assert path == [RunStatus.QUEUED, *[name for _, name in calls], RunStatus.AWAITING_APPROVAL]
