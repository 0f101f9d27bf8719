"""50 API clients hammering start / cancel / retry on one task (issue 5, "Faults").

Each client is its own thread with its own database connection, authenticated by
token as a script would be. Meanwhile a worker thread executes the phases of whatever
run is active (against the fake LLM), so that runs also reach the working phases and
awaiting approval (where Retry cancels and starts anew), and a sampler thread counts
the task's active runs. Runs on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import traceback
from collections import Counter
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from rest_framework.test import APIClient

from accounts.services import api_token_create
from pipelines.models import (
    ACTIVE_STATUSES,
    RUN_TRANSITIONS,
    TASK_STATUS_FOR_RUN,
    WORKING_STATUSES,
    PipelineRun,
    RunStatus,
    RunTransition,
)
from pipelines.phases.driver import run_advance
from tests.factories import TaskFactory
from tests.threads import DatabaseThread

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLIENTS = 50
HAMMER_SECONDS = 3.0
# On a starved box 50 clients may send one request each in HAMMER_SECONDS: the
# hammering then goes on until it has raced (or this long at most).
HAMMER_AT_MOST_SECONDS = 90.0
ERROR_BODY_KEYS = {"message", "code", "extra"}


def test_fifty_clients_hammering_start_cancel_retry_keep_one_active_run_and_no_5xx(fake_llm, owner, project) -> None:
    task = TaskFactory(project=project, title="Add x", description="x should exist")
    _, token = api_token_create(user=owner, name="hammer")
    seed = random.randrange(1 << 30)
    print(f"hammer seed {seed}")
    stop = threading.Event()
    barrier = threading.Barrier(CLIENTS + 2)
    responses: list[tuple[str, int, Any]] = []
    crashes: list[str] = []
    active_counts: list[int] = []
    lock = threading.Lock()

    def run_ids() -> list[int]:
        return list(PipelineRun.objects.filter(task=task).order_by("-number").values_list("pk", flat=True))

    def client_loop(number: int) -> None:
        rng = random.Random(seed + number)
        # A 500 comes back as a response: the test client's exception hook is global
        # and would pin a crash in one thread on another thread's request.
        client = APIClient(raise_request_exception=False)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        barrier.wait()
        while not stop.is_set():
            action = rng.choice(["start", "cancel", "retry"])
            if action == "start":
                url = f"/api/tasks/{task.pk}/start-pipeline"
            else:
                known = run_ids()
                if not known:
                    time.sleep(0.005)
                    continue
                # Mostly the latest run, sometimes an old one (retry of an old failed
                # run starts a new one too, and must then lose to the active run).
                run_id = known[0] if rng.random() < 0.8 else rng.choice(known)
                url = f"/api/runs/{run_id}/{action}"
            try:
                response = client.post(url)
            except Exception:
                with lock:
                    crashes.append(f"{action} {url}\n{traceback.format_exc()}")
                continue
            body = response.json() if response.get("Content-Type", "").startswith("application/json") else None
            with lock:
                responses.append((action, response.status_code, body))

    def worker_loop() -> None:
        barrier.wait()
        while not stop.is_set():
            run_id = (
                PipelineRun.objects.filter(task=task, status__in=[RunStatus.QUEUED, *WORKING_STATUSES])
                .values_list("pk", flat=True)
                .first()
            )
            if run_id is None:
                time.sleep(0.01)
                continue
            try:
                run_advance(run_id=run_id)
            except Exception:
                with lock:
                    crashes.append(f"run_advance({run_id})\n{traceback.format_exc()}")

    def sampler_loop() -> None:
        barrier.wait()
        while not stop.is_set():
            count = PipelineRun.objects.filter(task=task, status__in=ACTIVE_STATUSES).count()
            with lock:
                active_counts.append(count)
            time.sleep(0.002)  # leave the GIL to the clients

    threads = [DatabaseThread(target=client_loop, args=(n,)) for n in range(CLIENTS)]
    threads += [DatabaseThread(target=worker_loop), DatabaseThread(target=sampler_loop)]
    for thread in threads:
        thread.start()
    time.sleep(HAMMER_SECONDS)
    deadline = time.monotonic() + HAMMER_AT_MOST_SECONDS - HAMMER_SECONDS
    while not _raced(responses, lock) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a client hung"

    tally = Counter((action, status) for action, status, _ in responses)
    print(f"{len(responses)} requests, {len(active_counts)} samples: {sorted(tally.items())}")
    assert not crashes, crashes[0]
    server_errors = [(action, status, body) for action, status, body in responses if status >= 500]
    assert not server_errors, server_errors[:5]
    for action, status, body in responses:
        assert status in (200, 202) or 400 <= status < 500, (action, status, body)
        if status >= 400:
            assert isinstance(body, dict) and set(body) == ERROR_BODY_KEYS, (action, status, body)
    # The hammering really raced: runs were started, refused and cancelled.
    assert tally["start", 202] >= 1
    assert tally["start", 409] >= 1
    assert sum(n for (action, status), n in tally.items() if action == "cancel" and status == 200) >= 1

    # At most one active run at every sampled moment, and the database refuses a second.
    assert active_counts and max(active_counts) <= 1
    runs = list(PipelineRun.objects.filter(task=task).order_by("number"))
    assert len(runs) >= 2
    assert sum(run.status in ACTIVE_STATUSES for run in runs) <= 1
    assert [run.number for run in runs] == list(range(1, len(runs) + 1))
    if not any(run.status in ACTIVE_STATUSES for run in runs):
        PipelineRun.objects.create(task=task, number=len(runs) + 1)
    with pytest.raises(IntegrityError), transaction.atomic():
        PipelineRun.objects.create(task=task, number=len(runs) + 2)

    # Every run's audit rows form one valid path through RUN_TRANSITIONS.
    for run in runs:
        path = list(RunTransition.objects.filter(run=run).order_by("id").values_list("from_status", "to_status"))
        assert path[0] == ("", RunStatus.QUEUED), (run.number, path)
        for (_, before), (source, target) in itertools.pairwise(path):
            assert source == before, (run.number, path)
            assert target in RUN_TRANSITIONS[source], (run.number, path)
        assert path[-1][1] == run.status, (run.number, path)
        if run != runs[-1]:
            assert run.status not in ACTIVE_STATUSES, (run.number, run.status)

    # The task shows its latest run.
    latest = runs[-1]
    task.refresh_from_db()
    assert task.pipeline_state["run_id"] == latest.pk
    assert task.pipeline_state["status"] == latest.status
    if latest.status in TASK_STATUS_FOR_RUN:
        assert task.status == TASK_STATUS_FOR_RUN[latest.status]


def _raced(responses: list[tuple[str, int, Any]], lock: threading.Lock) -> bool:
    """Runs were started (two at least), a start refused, and an active run cancelled."""
    with lock:
        tally = Counter((action, status) for action, status, _ in responses)
    started = tally["start", 202] + tally["retry", 202]
    return started >= 2 and tally["start", 409] >= 1 and tally["cancel", 200] >= 1
