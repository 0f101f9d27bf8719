"""The database connection dropped under a running worker (issue 5, "Faults").

A real ``celery worker`` process streams the Coder's reply; meanwhile PostgreSQL
terminates that worker's backends (found by the ``application_name`` its DATABASE_URL
sets). The phase must end in a stated state and be executed again, the run must
complete, and the plan made before the drop must not be bought again. PostgreSQL +
Redis only: SQLite has no server connection to drop.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from config.celery import app
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus, RunTransition
from pipelines.runs.leases import runs_sweep
from pipelines.runs.services import run_start
from tests.factories import TaskFactory
from tests.fake_anthropic import EDITOR, ToolReply, coder_creates
from tests.threads import DatabaseThread
from tests.workers import (
    delete_queue,
    start_celery_worker,
    subprocess_database_url,
    wait_for_worker_ready,
    wait_until,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
        reason="PostgreSQL is required (DATABASE_URL=postgres://…): SQLite has no server connection to drop",
    ),
    pytest.mark.skipif(settings.REDIS_URL is None, reason="REDIS_URL is unset: a separate celery worker needs Redis"),
]

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
# The Coder's editing conversation: it creates app/x.py, then says it is done.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}
LEASE_SECONDS = 5


def _run_state(run_id: int) -> dict[str, Any]:
    return PipelineRun.objects.values("status", "lease_owner", "lease_expires_at").get(pk=run_id)


def _terminate_backends(application_name: str) -> int:
    """Kill the worker's PostgreSQL backends, and only the worker's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()",
            [application_name],
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def worker_queue() -> Iterator[str]:
    queue = f"autocoder-dbfault-{uuid.uuid4().hex[:10]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield queue
    finally:
        app.conf.task_default_queue = previous
        delete_queue(queue)


def test_a_dropped_database_connection_mid_phase_retries_the_phase(
    fake_llm, owner, project, worker_queue: str, tmp_path: Path
) -> None:
    application_name = f"autocoder-e2-{uuid.uuid4().hex[:8]}"
    database_url = f"{subprocess_database_url()}?application_name={application_name}"
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input=CREATE_X, text="slow " * 3000, chunk_size=5, chunk_delay=0.02),
        *CODER,
        ToolReply(input=PASS),
    )
    task = TaskFactory(project=project, title="Add x", description="x should exist")
    log = tmp_path / "worker.log"
    process = start_celery_worker(
        worker_queue,
        log,
        DATABASE_URL=database_url,
        ANTHROPIC_BASE_URL=fake_llm.url,
        ANTHROPIC_API_KEY="sk-ant-test-key",
        PIPELINE_LEASE_SECONDS=str(LEASE_SECONDS),
    )
    # celery beat's stand-in: the sweeper, every half second instead of every 2 s.
    stop_sweeping = threading.Event()
    swept: list[int] = []

    def sweep() -> None:
        while not stop_sweeping.wait(0.5):
            swept.extend(runs_sweep(grace_seconds=0))

    sweeper = DatabaseThread(target=sweep)
    try:
        wait_for_worker_ready(process, log)
        run_id = run_start(task=task, user=owner).pk
        wait_until(
            lambda: RunEvent.objects.filter(run_id=run_id, type="agent-log", data__agent="coder").exists(),
            timeout=30,
            why=lambda: f"run is {_run_state(run_id)}; worker log: {log.read_text()[-2000:]}",
        )
        assert _run_state(run_id)["status"] == RunStatus.CODING
        assert _terminate_backends(application_name) >= 1, "the worker's connection was found and dropped"
        sweeper.start()
        wait_until(
            lambda: _run_state(run_id)["status"] == RunStatus.AWAITING_APPROVAL,
            timeout=60,
            why=lambda: f"run is {_run_state(run_id)}; worker log: {log.read_text()[-3000:]}",
        )
        assert process.poll() is None, "the worker survived the dropped connection"
    finally:
        stop_sweeping.set()
        if sweeper.is_alive():
            sweeper.join(10)
        process.terminate()
        process.wait(15)

    print(f"swept: {swept}\n--- worker log ---\n{log.read_text()[-4000:]}")
    run = PipelineRun.objects.get(pk=run_id)
    assert run.lease_owner == "" and run.lease_expires_at is None
    # The coding phase ran again; the plan from before the drop was not bought again.
    assert list(AgentCall.objects.filter(run=run).values_list("agent", "phase")) == [
        ("planner", "planning"),
        ("coder", "coding"),
        ("coder", "coding"),
        ("reviewer", "reviewing"),
    ]
    requests = Counter(
        request.answer_tool or ("editor" if EDITOR in request.tool_names else "?") for request in fake_llm.requests
    )
    # The Coder's first turn twice (the drop cut it off), then its second turn.
    assert requests == {"submit_plan": 1, "editor": 3, "submit_review": 1}
    path = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    assert path == ["queued", "planning", "coding", "reviewing", "awaiting_approval"]
