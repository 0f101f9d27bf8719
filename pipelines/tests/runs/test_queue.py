"""Limits on runs at once (pipelines/runs/places.py, ``run_begin``): a run over its owner's or
its project's limit waits queued, oldest first, and shows its place in line."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from django.conf import settings
from django.urls import reverse

from pipelines.models import PipelineRun, RunStatus
from pipelines.phases.driver import run_advance
from pipelines.runs.leases import runs_needing_a_worker
from pipelines.runs.places import ordinal, run_queue_position, runs_free_to_start
from pipelines.runs.services import run_begin, run_cancel, run_start, run_transition
from tests.factories import ProjectFactory, TaskFactory, UserFactory
from tests.fake_anthropic import ToolReply, coder_creates
from tests.threads import DatabaseThread
from tests.workers import drive_in_process

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The runs the services hand to the broker (no worker runs in these tests)."""
    jobs: list[int] = []
    monkeypatch.setattr("pipelines.runs.services._enqueue_advance", jobs.append)
    return jobs


@pytest.fixture
def server_key(settings) -> None:
    settings.LLM_PROVIDER = "anthropic"
    settings.ANTHROPIC_API_KEY = "sk-test"


@pytest.fixture
def limits(settings):
    settings.RUNS_AT_ONCE_PER_USER = 4
    settings.RUNS_AT_ONCE_PER_PROJECT = 1
    return settings


def _queued_run(project, owner, title: str) -> PipelineRun:
    return run_start(task=TaskFactory(project=project, title=title), user=owner)


def _status(run: PipelineRun) -> str:
    return PipelineRun.objects.values_list("status", flat=True).get(pk=run.pk)


def test_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 103, 111)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "103rd",
        "111th",
    ]


@pytest.mark.django_db
def test_a_run_over_the_project_limit_waits_shows_its_place_and_starts_when_the_first_is_done(
    fake_llm, limits, sent, owner, project, client, owner_client, django_capture_on_commit_callbacks
) -> None:
    first = _queued_run(project, owner, "First")
    fake_llm.script(ToolReply(input=PLAN))
    run_advance(run_id=first.pk)
    assert _status(first) == RunStatus.CODING

    second = _queued_run(project, owner, "Second")
    third = _queued_run(project, owner, "Third")
    run_advance(run_id=second.pk)
    run_advance(run_id=third.pk)
    second.refresh_from_db()
    # Left untouched: still queued, never started, no transition beyond "started".
    assert second.status == RunStatus.QUEUED
    assert second.started_at is None
    assert list(second.transitions.values_list("to_status", flat=True)) == [RunStatus.QUEUED]
    assert _status(third) == RunStatus.QUEUED
    assert run_queue_position(run_id=second.pk) == 1
    assert run_queue_position(run_id=third.pk) == 2
    assert run_queue_position(run_id=first.pk) is None

    client.force_login(owner)
    board = client.get(reverse("tasks:board")).content.decode()
    assert "queued · 1st in line" in board
    assert "queued · 2nd in line" in board
    task_page = client.get(reverse("tasks:detail", args=[second.task_id])).content.decode()
    assert "Queued · 1st in line" in task_page
    api = owner_client.get(f"/api/runs/{third.pk}").json()
    assert api["queue_position"] == 2
    assert owner_client.get(f"/api/runs/{first.pk}").json()["queue_position"] is None

    # The first run reaches awaiting approval: its place frees, and the next in line
    # (only it: the project's limit is 1) is queued for a worker on commit.
    fake_llm.script(*CODER, ToolReply(input=PASS))
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        first = drive_in_process(first)
    assert first.status == RunStatus.AWAITING_APPROVAL
    assert second.pk in sent
    assert third.pk not in sent

    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    second = drive_in_process(second)
    assert second.status == RunStatus.AWAITING_APPROVAL
    assert _status(third) == RunStatus.QUEUED
    assert run_queue_position(run_id=third.pk) == 1
    assert owner_client.get(f"/api/runs/{third.pk}").json()["queue_position"] == 1


@pytest.mark.django_db
def test_the_per_user_limit_counts_the_owners_runs_across_projects(
    settings, server_key, sent, owner, project, other_user, other_project
) -> None:
    settings.RUNS_AT_ONCE_PER_USER = 1
    settings.RUNS_AT_ONCE_PER_PROJECT = 5
    second_project = ProjectFactory(owner=owner, name="Second")
    first = _queued_run(project, owner, "First")
    second = _queued_run(second_project, owner, "Second")
    someone_elses = _queued_run(other_project, other_user, "Theirs")

    assert run_begin(run=first)
    assert not run_begin(run=second)
    assert _status(second) == RunStatus.QUEUED
    # Another user's runs are not counted against this one.
    assert run_begin(run=someone_elses)

    # Paused (like awaiting approval) does not count: the place is free again.
    run_transition(run=first, to_status=RunStatus.PAUSED, reason="budget", fields={"error": "budget"})
    assert run_begin(run=second)
    assert _status(second) == RunStatus.PLANNING


@pytest.mark.django_db
def test_the_projects_own_limit_beats_the_setting(limits, server_key, sent, owner, project) -> None:
    project.runs_at_once = 2
    project.save()
    runs = [_queued_run(project, owner, f"Task {n}") for n in range(3)]
    assert [run_begin(run=run) for run in runs] == [True, True, False]

    other = ProjectFactory(owner=owner, name="Other")
    other.runs_at_once = None  # the setting: 1
    other.save()
    theirs = [_queued_run(other, owner, f"Other {n}") for n in range(2)]
    assert [run_begin(run=run) for run in theirs] == [True, False]


@pytest.mark.django_db
def test_a_cancelled_waiting_run_frees_its_place_in_line(
    limits, server_key, sent, owner, project, django_capture_on_commit_callbacks
) -> None:
    working = _queued_run(project, owner, "Working")
    assert run_begin(run=working)
    second = _queued_run(project, owner, "Second")
    third = _queued_run(project, owner, "Third")
    assert run_queue_position(run_id=third.pk) == 2

    run_cancel(run=second)
    assert run_queue_position(run_id=second.pk) is None
    assert run_queue_position(run_id=third.pk) == 1

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        run_transition(run=working, to_status=RunStatus.FAILED, reason="gave up", fields={"error": "x"})
    assert sent == [third.pk]
    assert run_begin(run=third)


@pytest.mark.django_db
def test_a_younger_run_never_overtakes_an_older_one_that_may_start(settings, server_key, sent, owner, project) -> None:
    settings.RUNS_AT_ONCE_PER_USER = 1
    settings.RUNS_AT_ONCE_PER_PROJECT = 5
    working = _queued_run(project, owner, "Working")
    assert run_begin(run=working)
    older = _queued_run(project, owner, "Older")
    younger = _queued_run(project, owner, "Younger")
    run_transition(run=working, to_status=RunStatus.CANCELLED, reason="stop")

    assert not run_begin(run=younger)
    assert run_begin(run=older)


@pytest.mark.django_db
def test_a_run_whose_project_is_full_does_not_hold_up_another_project(limits, server_key, sent, owner, project) -> None:
    working = _queued_run(project, owner, "Working")
    assert run_begin(run=working)
    waiting = _queued_run(project, owner, "Waiting in a full project")
    elsewhere = _queued_run(ProjectFactory(owner=owner, name="Elsewhere"), owner, "Younger, elsewhere")

    assert runs_free_to_start(owner_id=owner.pk) == [elsewhere.pk]
    assert run_begin(run=elsewhere)
    assert _status(waiting) == RunStatus.QUEUED


@pytest.mark.django_db
def test_the_sweeper_leaves_waiting_runs_alone_until_a_place_frees(limits, server_key, sent, owner, project) -> None:
    working = _queued_run(project, owner, "Working")
    assert run_begin(run=working)
    waiting = _queued_run(project, owner, "Waiting")

    assert waiting.pk not in runs_needing_a_worker(grace_seconds=0)
    run_transition(run=working, to_status=RunStatus.PAUSED, reason="x", fields={"error": "x"})
    # Its wake-up job could have been lost with the broker: the sweeper queues it now.
    assert waiting.pk in runs_needing_a_worker(grace_seconds=0)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_starts_of_one_owner_with_one_place_start_exactly_one(
    fake_llm, settings, owner, project, monkeypatch
) -> None:
    monkeypatch.setattr("pipelines.runs.services._enqueue_advance", lambda run_id: None)
    settings.RUNS_AT_ONCE_PER_USER = 1
    settings.RUNS_AT_ONCE_PER_PROJECT = 5
    older = _queued_run(project, owner, "One")
    younger = _queued_run(ProjectFactory(owner=owner, name="Another"), owner, "Two")

    # Widen the window between counting the working runs and reading the queue: without
    # the lock, the younger run's start would count no run working, then find the older
    # one already gone from the queue (started meanwhile) and take a place too.
    def slow_counter(*args: Any) -> Counter[Any]:
        counted: Counter[Any] = Counter(*args)
        time.sleep(0.3)
        return counted

    monkeypatch.setattr("pipelines.runs.places.Counter", slow_counter)
    # Only one planner reply: a second start would find none and stop its run.
    fake_llm.script(ToolReply(input=PLAN))
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def advance(run_id: int, delay: float) -> None:
        try:
            barrier.wait(5)
            time.sleep(delay)
            run_advance(run_id=run_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        DatabaseThread(target=advance, args=(older.pk, 0.0)),
        DatabaseThread(target=advance, args=(younger.pk, 0.1)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert (_status(older), _status(younger)) == (RunStatus.CODING, RunStatus.QUEUED)


# --- Places shared by users (the embedded worker's threads) -----------------------------


@pytest.fixture
def four_places(monkeypatch: pytest.MonkeyPatch, settings):  # type: ignore[no-untyped-def]
    """As in the embedded server: a worker of four threads, so four places."""
    monkeypatch.setattr("pipelines.runs.places.embedded_worker_threads", lambda: 4)
    settings.RUNS_AT_ONCE_PER_USER = 4
    settings.RUNS_AT_ONCE_PER_PROJECT = 10
    return settings


@pytest.mark.django_db
def test_a_freed_place_goes_to_the_user_who_has_waited_longest_not_to_the_one_holding_most(
    four_places, server_key, sent, owner, project, other_user, other_project, django_capture_on_commit_callbacks
) -> None:
    third_user = UserFactory(email="carol@example.com")
    carols = ProjectFactory(owner=third_user, name="Carol's project")
    alices = [_queued_run(project, owner, f"Alice {n}") for n in range(1, 4)]
    assert all(run_begin(run=run) for run in alices)
    bob_first = _queued_run(other_project, other_user, "Bob 1")
    assert run_begin(run=bob_first)  # four places taken: three of Alice's, one of Bob's
    bob_waiting = _queued_run(other_project, other_user, "Bob 2")
    carol_waiting = _queued_run(carols, third_user, "Carol 1")
    alice_waiting = _queued_run(project, owner, "Alice 4")
    assert not any(run_begin(run=run) for run in (bob_waiting, carol_waiting, alice_waiting))

    # One of Alice's runs ends: the place goes to the longest-waiting user's run (Bob's),
    # not back to Alice (who holds the most), nor to a younger one.
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        run_cancel(run=alices[0])
    assert sent == [bob_waiting.pk]
    assert not run_begin(run=alice_waiting) and not run_begin(run=carol_waiting)
    assert run_begin(run=bob_waiting)
    # The sweeper agrees: the others wait, they are not lost.
    needing = runs_needing_a_worker(grace_seconds=0)
    assert carol_waiting.pk not in needing and alice_waiting.pk not in needing

    # Next place: Carol (waiting since before Alice's fourth).
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        run_cancel(run=bob_first)
    assert sent == [carol_waiting.pk] and run_begin(run=carol_waiting)


@pytest.mark.django_db
def test_with_other_users_no_user_takes_every_place(four_places, server_key, sent, owner, project, other_user) -> None:
    alices = [_queued_run(project, owner, f"Alice {n}") for n in range(1, 6)]
    assert [run_begin(run=run) for run in alices] == [True, True, True, False, False]
    assert _status(alices[3]) == RunStatus.QUEUED


@pytest.mark.django_db
def test_alone_a_user_has_every_place(four_places, server_key, sent, owner, project) -> None:
    alices = [_queued_run(project, owner, f"Alice {n}") for n in range(1, 6)]
    assert [run_begin(run=run) for run in alices] == [True, True, True, True, False]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(settings.REDIS_URL is not None, reason="the embedded mode (REDIS_URL unset)")
def test_in_the_embedded_worker_one_users_runs_do_not_starve_anothers(
    fake_llm, owner, project, other_user, other_project, settings
) -> None:
    """The finding: the per-user limit (4) equalled the worker's threads (4), so Alice's
    four planners held every thread and Bob's run waited for one of them to end."""
    from tests.test_worker_threads_e2e import PlannerGates
    from tests.workers import embedded_worker, wait_until

    settings.RUNS_AT_ONCE_PER_USER = 4
    settings.RUNS_AT_ONCE_PER_PROJECT = 10
    settings.LLM_TIMEOUT_SECONDS = 60  # the planners wait at their gates, not time out
    gates = PlannerGates()
    fake_llm.fallback = gates.reply

    def start(user, project, gate: str) -> PipelineRun:  # type: ignore[no-untyped-def]
        return run_start(task=TaskFactory(project=project, title=gate, description=f"[gate {gate}]"), user=user)

    def status() -> dict[str, str]:
        found = dict(PipelineRun.objects.values_list("task__title", "status"))
        return {title: found[title] for title in sorted(found)}

    try:
        with embedded_worker(concurrency=4, beat=False):
            for n in range(1, 6):
                start(owner, project, f"a{n}")
            start(other_user, other_project, "b1")
            # Bob's planner runs while Alice's first runs are still in theirs.
            wait_until(lambda: gates.waiting() == {"a1", "a2", "a3", "b1"}, 30, lambda: f"{gates.waiting()} {status()}")
            assert status() == {
                "a1": "planning", "a2": "planning", "a3": "planning", "a4": "queued", "a5": "queued", "b1": "planning",
            }  # fmt: skip
            # One of Alice's ends: her fourth takes its place (her fifth still waits).
            run_cancel(run=PipelineRun.objects.get(task__title="a1"))
            gates.open("a1")
            wait_until(lambda: gates.waiting() == {"a2", "a3", "a4", "b1"}, 30, lambda: f"{gates.waiting()} {status()}")
            assert status()["a5"] == "queued"
            for run in PipelineRun.objects.exclude(status=RunStatus.CANCELLED):
                run_cancel(run=run)
            gates.open_all()
    finally:
        gates.open_all()
