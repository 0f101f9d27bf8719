"""A worker SIGKILLed in each phase: the run resumes after a restart and completes, and
the phases done before the kill are not paid for twice (issue 5, "Faults").

The doomed worker is a process of its own running the phases as the Celery task does
(``run_advance`` in a loop), so that the kill is a real process death in both
topologies and leaves no unacknowledged message behind in a shared Redis. The worker
that takes over is the topology's real one: the embedded worker (SQLite run) or a
``celery worker`` process (PostgreSQL + Redis run), fed by the sweeper.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus, RunTransition
from pipelines.runs.leases import runs_needing_a_worker, runs_sweep
from pipelines.runs.services import run_start
from pipelines.tests.repositories import committed_repository
from tests.factories import TaskFactory
from tests.fake_anthropic import EDITOR, RecordedRequest, TextReply, ToolReply, coder_creates, coder_replaces
from tests.workers import delete_queue, subprocess_env, topology_worker, wait_until, worker_log_tail

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
# The Coder's editing conversation: it creates app/x.py, then says it is done.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
CODER = coder_creates("app/x.py", "x = 1\n")
FIX_X = {"command": "str_replace", "path": "app/x.py", "old_str": "x = 1", "new_str": "x = 2"}
FIX = coder_replaces("app/x.py", "x = 1", "x = 2")
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
from pipelines.phases.driver import run_advance

run_id = int(sys.argv[1])
while PipelineRun.objects.get(pk=run_id).status in (RunStatus.QUEUED, *WORKING_STATUSES):
    run_advance(run_id=run_id)
"""


def _slow(reply_input: dict[str, Any], name: str | None = None) -> ToolReply:
    # About a minute of streaming: the kill always lands mid-stream.
    return ToolReply(input=reply_input, name=name, text="slow " * 3000, chunk_size=5, chunk_delay=0.02)


# phase killed in → (agent streaming, replies before the kill, the killed reply, the
# replies after the restart, the calls a complete run records in order).
CASES: dict[str, tuple[str, list[ToolReply], ToolReply, list[ToolReply], list[tuple[str, str]]]] = {
    "planning": (
        "planner",
        [],
        _slow(PLAN),
        [ToolReply(input=PLAN), *CODER, ToolReply(input=PASS)],
        [("planner", "planning"), ("coder", "coding"), ("coder", "coding"), ("reviewer", "reviewing")],
    ),
    "coding": (
        "coder",
        [ToolReply(input=PLAN)],
        _slow(CREATE_X, EDITOR),
        [*CODER, ToolReply(input=PASS)],
        [("planner", "planning"), ("coder", "coding"), ("coder", "coding"), ("reviewer", "reviewing")],
    ),
    "reviewing": (
        "reviewer",
        [ToolReply(input=PLAN), *CODER],
        _slow(PASS),
        [ToolReply(input=PASS)],
        [("planner", "planning"), ("coder", "coding"), ("coder", "coding"), ("reviewer", "reviewing")],
    ),
    "fixing": (
        "coder",
        [ToolReply(input=PLAN), *CODER, ToolReply(input=FAIL)],
        _slow(FIX_X, EDITOR),
        [*FIX, ToolReply(input=PASS)],
        [
            ("planner", "planning"),
            ("coder", "coding"),
            ("coder", "coding"),
            ("reviewer", "reviewing"),
            ("coder", "fixing"),
            ("coder", "fixing"),
            ("reviewer", "reviewing"),
            # The fixed finding is distilled into a lesson once the review passes.
            ("distiller", "reviewing"),
        ],
    ),
}
# Requests by the tool that answers them: the Coder's turns carry the editor.
TOOL_OF_AGENT = {"planner": "submit_plan", "coder": EDITOR, "reviewer": "submit_review", "distiller": "record_lessons"}


def _answering_tool(request: RecordedRequest) -> str:
    return request.answer_tool or (EDITOR if EDITOR in request.tool_names else "?")


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
            timeout=60,  # includes the runner's start-up
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
        # Once the dead lease runs out the run needs a worker, and the sweeper (a loop
        # in celery beat, every PIPELINE_SWEEP_SECONDS in production) queues it again.
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
    requests = Counter(_answering_tool(request) for request in fake_llm.requests)
    expected = Counter(TOOL_OF_AGENT[name] for name, _ in calls) + Counter({TOOL_OF_AGENT[agent]: 1})
    assert requests == expected
    # The audit trail: each phase entered once, as in a run that was never killed.
    path = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    phases = [name for index, (_, name) in enumerate(calls) if index == 0 or calls[index - 1][1] != name]
    assert path == [RunStatus.QUEUED, *phases, RunStatus.AWAITING_APPROVAL]


# --- Recovery time, with the production settings ---------------------------------------

# The requirement: a run whose worker died is running again within 15 s (it took
# 96-102 s with a 90 s lease and a sweeper every 30 s).
RESUME_WITHIN_SECONDS = 15
CALC = "def add(a, b):\n    return a - b\n"
# The Coder on a linked repository edits the worktree with the text editor.
CALC_FIXED = {"command": "str_replace", "path": "app/calc.py", "old_str": "a - b", "new_str": "a + b"}


@pytest.fixture
def repository_env(project, tmp_path: Path, settings) -> dict[str, str]:
    """A git repository linked to ``project``; the settings its workers need."""
    from repos.services import repository_link

    paths = {"REPOS_ROOT": str(tmp_path / "repos"), "WORKTREES_ROOT": str(tmp_path / "worktrees")}
    settings.REPOS_ROOT, settings.WORKTREES_ROOT = paths["REPOS_ROOT"], paths["WORKTREES_ROOT"]
    root = committed_repository(tmp_path / "repos" / "calc", {"app/calc.py": CALC})
    repository_link(project=project, path=str(root))
    return paths


def _new_events(run_id: int, after: int) -> bool:
    return RunEvent.objects.filter(run_id=run_id, id__gt=after).exists()


def test_a_run_whose_worker_was_killed_runs_again_within_15_s_and_no_call_is_bought_twice(
    fake_llm, owner, project, repository_env: dict[str, str], tmp_path: Path
) -> None:
    """The production lease (PIPELINE_LEASE_SECONDS) and sweeper (the loop celery beat
    runs, every PIPELINE_SWEEP_SECONDS), with a worker that survives. The Coder has read
    a file (a call bought and recorded) and is streaming its answer when its worker is
    SIGKILLed: the run must be running again within 15 s, and the only call made twice
    is the one the kill cut off."""
    from pipelines.runs.leases import Sweeper

    task = TaskFactory(project=project, title="Make add add", description="add(2, 3) should be 5")
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input={"command": "view", "path": "app/calc.py"}),
        _slow(CALC_FIXED, name=EDITOR),
    )
    run_id = run_start(task=task, user=owner).pk
    # No PIPELINE_LEASE_SECONDS here: the default is what is measured.
    env = {"ANTHROPIC_BASE_URL": fake_llm.url, "ANTHROPIC_API_KEY": "sk-ant-test-key", **repository_env}
    doomed_queue = f"autocoder-doomed-{uuid.uuid4().hex[:10]}"
    with topology_worker(tmp_path / "worker.log", **env):
        sweeper = Sweeper(interval=settings.PIPELINE_SWEEP_SECONDS).start()
        doomed = subprocess.Popen(
            [sys.executable, "-c", PHASE_RUNNER, str(run_id)],
            cwd=settings.BASE_DIR,
            env=subprocess_env(CELERY_QUEUE=doomed_queue, **env),
            start_new_session=True,
        )
        try:
            wait_until(
                lambda: len(fake_llm.requests) == 3 and _streaming_in_phase(run_id, "coding", "coder"),
                timeout=60,  # includes the runner's start-up
                why=lambda: f"run is {_run_state(run_id)}; runner exit code {doomed.poll()}",
            )
            # Somewhere in the lease's renewal cycle, not at its start.
            time.sleep(random.uniform(0, settings.PIPELINE_LEASE_SECONDS / 4))
            fake_llm.script(ToolReply(name=EDITOR, input=CALC_FIXED), TextReply("Fixed add."), ToolReply(input=PASS))
            os.killpg(doomed.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            doomed.wait(10)
            last_event = RunEvent.objects.filter(run_id=run_id).latest("id").pk
            assert _run_state(run_id)["lease_owner"], "the dead worker's lease is still on the row"

            wait_until(
                lambda: _new_events(run_id, last_event),
                timeout=RESUME_WITHIN_SECONDS + 15,
                why=lambda: f"run is {_run_state(run_id)}",
            )
            resumed_after = time.monotonic() - killed_at
            # How soon it resumed is what is measured; finishing only has to happen (a
            # starved CI box has taken over a minute for the rest of the run).
            wait_until(
                lambda: _run_state(run_id)["status"] == RunStatus.AWAITING_APPROVAL,
                timeout=180,
                why=lambda: (
                    f"{_run_state(run_id)}; {fake_llm.pending} replies never asked for\n"
                    f"{worker_log_tail(tmp_path / 'worker.log')}"
                ),
            )
        finally:
            sweeper.stop()
            if doomed.poll() is None:
                os.killpg(doomed.pid, signal.SIGKILL)
            if settings.REDIS_URL is not None:
                delete_queue(doomed_queue)

    print(f"\nkilled worker's run running again after {resumed_after:.1f} s")
    assert resumed_after < RESUME_WITHIN_SECONDS, f"resumed {resumed_after:.1f} s after the kill"
    run = PipelineRun.objects.get(pk=run_id)
    # Bought once each: the plan, the Coder's read, its edit, its summary, the review...
    calls = AgentCall.objects.filter(run=run)
    assert list(calls.values_list("agent", "phase")) == [
        ("planner", "planning"),
        ("coder", "coding"),
        ("coder", "coding"),
        ("coder", "coding"),
        ("reviewer", "reviewing"),
    ]
    assert run.input_tokens == sum(
        call.input_tokens + call.cache_creation_input_tokens + call.cache_read_input_tokens for call in calls
    )
    # ... and asked for once each, but for the answer the kill cut off: the resumed
    # phase went on from the file it had read (reused, its tool run again locally).
    coder = [request for request in fake_llm.requests if EDITOR in request.tool_names]
    assert [len(request.tool_results) for request in coder] == [0, 1, 1, 2]
    # The same request again; only the system prompt's date may have moved on (at midnight).
    assert _without_clock(coder[1].body) == _without_clock(coder[2].body)
    assert len(fake_llm.requests) == 6
    # The edit applied once, and each phase was entered once.
    assert run.change_problems == []
    assert [change["file_path"] for change in run.file_changes] == ["app/calc.py"]
    assert "a + b" in run.file_changes[0]["new_content"]
    path = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    assert path == [RunStatus.QUEUED, "planning", "coding", "reviewing", RunStatus.AWAITING_APPROVAL]


def test_a_worker_stalled_past_its_lease_writes_nothing_when_it_wakes(fake_llm, owner, project, tmp_path: Path) -> None:
    """The worker is stopped (SIGSTOP: a paused VM, a long pause) while the Planner
    streams; its lease runs out, the sweeper hands the run on and another worker
    finishes it. Woken (SIGCONT), the stale worker gives the phase up and writes
    nothing: no transition, no call, no log line, no memory of the call, no lease."""
    from pipelines.runs.leases import Sweeper

    task = TaskFactory(project=project, title="Add x", description="x should exist")
    fake_llm.script(_slow(PLAN))
    run_id = run_start(task=task, user=owner).pk
    stale_queue = f"autocoder-stale-{uuid.uuid4().hex[:10]}"
    stale = subprocess.Popen(
        [sys.executable, "-c", PHASE_RUNNER, str(run_id)],
        cwd=settings.BASE_DIR,
        env=subprocess_env(CELERY_QUEUE=stale_queue, **_llm_env(fake_llm)),
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: _streaming_in_phase(run_id, "planning", "planner"),
            timeout=60,  # includes the runner's start-up
            why=lambda: f"run is {_run_state(run_id)}; runner exit code {stale.poll()}",
        )
        os.killpg(stale.pid, signal.SIGSTOP)
        fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
        with topology_worker(tmp_path / "worker.log", **_llm_env(fake_llm)):
            sweeper = Sweeper(interval=0.5).start()
            try:
                wait_until(
                    lambda: _run_state(run_id)["status"] == RunStatus.AWAITING_APPROVAL,
                    timeout=60,
                    why=lambda: str(_run_state(run_id)),
                )
            finally:
                sweeper.stop()
        written = _everything_written(run_id)
        os.killpg(stale.pid, signal.SIGCONT)
        # It notices, gives the phase up, and exits: the run needs no worker any more.
        assert stale.wait(30) == 0
    finally:
        if stale.poll() is None:
            os.killpg(stale.pid, signal.SIGKILL)
        if settings.REDIS_URL is not None:
            delete_queue(stale_queue)
    assert _everything_written(run_id) == written
    path = list(RunTransition.objects.filter(run_id=run_id).values_list("to_status", flat=True))
    assert path == [RunStatus.QUEUED, "planning", "coding", "reviewing", RunStatus.AWAITING_APPROVAL]


def _everything_written(run_id: int) -> dict[str, Any]:
    from memory.models.notes import DailyLogEntry

    return {
        "agent memory": list(DailyLogEntry.objects.filter(session=f"run-{run_id}").values_list("pk", flat=True)),
        "run": PipelineRun.objects.values().get(pk=run_id),
        "transitions": list(RunTransition.objects.filter(run_id=run_id).values_list("pk", flat=True)),
        "calls": list(AgentCall.objects.filter(run_id=run_id).values_list("pk", flat=True)),
        "events": list(RunEvent.objects.filter(run_id=run_id).values_list("pk", flat=True)),
    }


def _without_clock(body: dict[str, object]) -> str:
    return re.sub(r"Current date: \w+ [0-9-]+ UTC", "Current date: (today)", json.dumps(body, sort_keys=True))
