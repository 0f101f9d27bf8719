"""The pipeline end to end through real workers, as a user drives it over the API.

Embedded run (no REDIS_URL): the in-process worker of config/embedded.py.
Production run (REDIS_URL set): a separate ``celery -A config worker`` process on Redis.
Either way the LLM is the fake Anthropic server, reached over HTTP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.services import api_token_create
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus
from pipelines.runs.leases import runs_sweep
from tests.factories import TaskFactory
from tests.fake_anthropic import EDITOR, ToolReply, coder_creates, coder_replaces
from tests.threads import DatabaseThread
from tests.workers import subprocess_env, topology_worker, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
# The Coder's editing conversation: it creates app/x.py, then says it is done.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
CODER = coder_creates("app/x.py", "x = 1\n")
FAIL = {"pass": False, "findings": [{"file": "app/x.py", "line": 1, "severity": "major", "message": "x must be 2"}]}
PASS = {"pass": True, "findings": []}


@pytest.fixture
def worker(fake_llm, tmp_path: Path) -> Iterator[None]:
    with topology_worker(tmp_path / "worker.log", **_llm_env(fake_llm)):
        yield


def _llm_env(fake_llm) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": fake_llm.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key",
        "PIPELINE_LEASE_SECONDS": "5",
    }


@pytest.fixture
def client(owner) -> APIClient:
    client = APIClient()
    _, raw = api_token_create(user=owner, name="e2e")
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


@pytest.fixture
def task(project):
    return TaskFactory(project=project, title="Add x", description="x should exist")


def _status(run_id: int) -> str:
    return PipelineRun.objects.values_list("status", flat=True).get(pk=run_id)


def test_a_run_passes_after_a_fix_and_is_approved(worker, fake_llm, client, task) -> None:
    fake_llm.script(
        ToolReply(input=PLAN, text="Planning the work. " * 5, chunk_size=8),
        *CODER,
        ToolReply(input=FAIL),
        *coder_replaces("app/x.py", "x = 1", "x = 2"),
        ToolReply(input=PASS),
    )
    started = client.post(f"/api/tasks/{task.pk}/start-pipeline")
    assert started.status_code == 202
    run_id = started.json()["id"]
    wait_until(lambda: _status(run_id) == RunStatus.AWAITING_APPROVAL, timeout=60, why=lambda: _status(run_id))

    run = client.get(f"/api/runs/{run_id}").json()
    assert run["iteration"] == 2
    assert [entry["pass"] for entry in run["review_history"]] == [False, True]
    types = list(RunEvent.objects.filter(task=task).order_by("id").values_list("type", flat=True))
    phases = [e.data["status"] for e in RunEvent.objects.filter(task=task, type="phase-change").order_by("id")]
    assert phases == ["queued", "planning", "coding", "reviewing", "fixing", "reviewing", "awaiting_approval"]
    assert types[-1] == "pipeline-complete"
    approved = client.post(f"/api/runs/{run_id}/approve")
    assert approved.json()["status"] == "approved"
    task.refresh_from_db()
    assert task.status == "done"


def test_cancel_mid_stream_stops_the_worker_within_a_second(worker, fake_llm, client, task) -> None:
    fake_llm.script(ToolReply(input=PLAN, text="word " * 2000, chunk_size=5, chunk_delay=0.02))
    run_id = client.post(f"/api/tasks/{task.pk}/start-pipeline").json()["id"]
    wait_until(lambda: RunEvent.objects.filter(task=task, type="agent-log").exists(), timeout=30)
    cancelled_at = timezone.now()
    assert client.post(f"/api/runs/{run_id}/cancel").json()["status"] == "cancelled"
    time.sleep(1.5)
    last_token = RunEvent.objects.filter(task=task, type="agent-log").latest("id").created_at
    # Without the cancel the stream would go on for ~20 s.
    assert (last_token - cancelled_at).total_seconds() < 1.0
    assert AgentCall.objects.filter(run_id=run_id).count() == 0, "the cancelled call's output is not recorded"
    assert _status(run_id) == RunStatus.CANCELLED


def test_twenty_concurrent_starts_make_exactly_one_run(worker, fake_llm, owner, task) -> None:
    _, raw = api_token_create(user=owner, name="race")
    codes: list[int] = []
    barrier = threading.Barrier(20)

    def start() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
        barrier.wait()
        codes.append(client.post(f"/api/tasks/{task.pk}/start-pipeline").status_code)

    threads = [DatabaseThread(target=start) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(codes) == [202] + [409] * 19
    assert PipelineRun.objects.filter(task=task).count() == 1
    run = PipelineRun.objects.get(task=task)
    wait_until(lambda: _status(run.pk) == RunStatus.AWAITING_APPROVAL, timeout=60)


def test_a_worker_killed_mid_phase_is_resumed_from_the_last_completed_phase(
    fake_llm, client, task, tmp_path: Path
) -> None:
    """SIGKILL a separate worker process while the Coder streams; the sweeper gives the
    run to another worker, which finishes it without paying for the plan again."""
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input=CREATE_X, text="slow " * 3000, chunk_size=5, chunk_delay=0.02),
    )
    run_id = client.post(f"/api/tasks/{task.pk}/start-pipeline").json()["id"]
    # A bare phase runner in its own process (the same code a Celery task calls), so
    # that the kill is a real process death in both topologies.
    script = (
        "import django, sys; django.setup(); "
        "from pipelines.phases.driver import run_advance; "
        "run_advance(run_id=int(sys.argv[1])); run_advance(run_id=int(sys.argv[1]))"
    )
    doomed = subprocess.Popen(
        [sys.executable, "-c", script, str(run_id)],
        cwd=settings.BASE_DIR,
        env=subprocess_env(**_llm_env(fake_llm)),
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: RunEvent.objects.filter(task=task, type="agent-log", data__agent="coder").exists(), timeout=60
        )
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(10)
    finally:
        if doomed.poll() is None:
            os.killpg(doomed.pid, signal.SIGKILL)
    run = PipelineRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CODING
    assert run.plan == PLAN["subtasks"], "the completed phase's output was persisted"
    assert run.lease_owner, "the dead worker's lease is still on the row"

    fake_llm.script(*CODER, ToolReply(input=PASS))
    with topology_worker(tmp_path / "worker.log", **_llm_env(fake_llm)):
        # The lease (5 s in this test) runs out; the sweeper (in celery beat, every 2 s
        # in production) finds the run and queues it again.
        wait_until(lambda: run_id in runs_sweep(grace_seconds=0), timeout=30)
        wait_until(lambda: _status(run_id) == RunStatus.AWAITING_APPROVAL, timeout=60, why=lambda: _status(run_id))
    assert AgentCall.objects.filter(run_id=run_id, agent="planner").count() == 1


def test_a_starting_worker_imports_the_llm_client_before_the_first_run_needs_it() -> None:
    # In a fresh interpreter: this one has imported the SDK long ago.
    script = (
        "import sys, django; django.setup()\n"
        "from celery.signals import worker_init\n"
        "assert 'anthropic' not in sys.modules, 'imported before any worker started'\n"
        "worker_init.send(sender=None)\n"
        "print('anthropic' in sys.modules, 'llm.providers.anthropic' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
