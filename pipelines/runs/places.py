"""Limits on runs at once: which queued runs may start now, and a queued run's place in
line.

A run works (planning to fixing, WORKING_STATUSES) only while its owner has fewer than
RUNS_AT_ONCE_PER_USER runs working and its project fewer than its ``runs_at_once`` (or
RUNS_AT_ONCE_PER_PROJECT); runs awaiting approval or paused do not count. Over either
limit a run waits queued. Queued runs take free places oldest first: a run never
overtakes an older one that could start, but a run whose own project (or owner) is full
does not hold up a younger run of another project or another user.

In the embedded mode the places are also the worker's threads (``run_places``): a run
working past them would hold a job waiting for a thread. There, runs across all users work
at most that many at once, and — when there is more than one user — no user has more than
one place fewer than there are, so a place is always left for someone else. When a place
frees it goes to the user who has waited longest: the queued run waiting longest that may
start (each user's runs are considered oldest first, so the oldest of them all belongs to
the user who has waited longest), not to the user who holds the most places.

``pipelines.runs.services.run_begin`` decides under a lock on the owner's row (and, with
places, a lock every start takes); a run leaving a working status queues the runs that may
then start (``run_transition``, on commit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q

from core.workers import embedded_worker_threads
from pipelines.models import WORKING_STATUSES, PipelineRun, RunStatus


def run_places() -> int:
    """How many runs may work at once across all users: the embedded worker's threads in
    the embedded mode; 0 (no such limit, only the users' and projects') otherwise."""
    return embedded_worker_threads()


def user_runs_at_once(*, places: int) -> int:
    """The most runs one user may have working: RUNS_AT_ONCE_PER_USER and, with ``places``
    and more than one (active) user, at most one fewer than the places."""
    limit = int(settings.RUNS_AT_ONCE_PER_USER)
    if places and get_user_model().objects.filter(is_active=True)[:2].count() > 1:
        limit = min(limit, max(places - 1, 1))
    return limit


def runs_free_to_start(*, owner_id: int | None = None) -> list[int]:
    """The queued runs that may start now, in the order free places go to them (ids);
    with ``owner_id``, only that owner's. With places (``run_places``) every user's runs
    compete for them, so all are considered; without, an owner's runs only compete with
    the owner's own."""
    places = run_places()
    runs = PipelineRun.objects.all()
    if owner_id is not None and not places:
        runs = runs.filter(task__project__owner_id=owner_id)
    working_runs = list(
        runs.filter(status__in=WORKING_STATUSES).order_by().values_list("task__project__owner_id", "task__project_id")
    )
    owner_working = Counter(owner for owner, _ in working_runs)
    project_working = Counter(project for _, project in working_runs)
    total = len(working_runs)
    per_user = user_runs_at_once(places=places)
    queued = (
        runs.filter(status=RunStatus.QUEUED)
        .order_by("created_at", "id")
        .values_list("pk", "task__project__owner_id", "task__project_id", "task__project__runs_at_once")
    )
    free: list[int] = []
    for run_id, owner, project_id, project_limit in queued:
        if places and total >= places:
            break
        if owner_working[owner] >= per_user:
            continue  # its owner is full: it waits, younger runs of other users may go
        if project_working[project_id] >= (project_limit or settings.RUNS_AT_ONCE_PER_PROJECT):
            continue  # its project is full: it waits, younger runs of other projects may go
        if owner_id is None or owner == owner_id:
            free.append(run_id)
        total += 1
        owner_working[owner] += 1
        project_working[project_id] += 1
    return free


def runs_waiting(*, run_ids: Iterable[int]) -> set[int]:
    """Those of ``run_ids`` that are queued and must wait (over a limit), for the sweeper."""
    run_ids = list(run_ids)
    if not run_ids:
        return set()
    owners = dict(
        PipelineRun.objects.filter(pk__in=run_ids, status=RunStatus.QUEUED).values_list("pk", "task__project__owner_id")
    )
    if not owners:
        return set()
    if run_places():
        return set(owners) - set(runs_free_to_start())
    free: set[int] = set()
    for owner_id in set(owners.values()):
        free.update(runs_free_to_start(owner_id=owner_id))
    return set(owners) - free


def run_queue_position(*, run_id: int) -> int | None:
    """A queued run's place among its owner's queued runs, oldest first (1 = next in
    line); None when the run is not queued."""
    run = (
        PipelineRun.objects.filter(pk=run_id, status=RunStatus.QUEUED)
        .values("created_at", "task__project__owner_id")
        .first()
    )
    if run is None:
        return None
    created_at = run["created_at"]
    ahead = PipelineRun.objects.filter(task__project__owner_id=run["task__project__owner_id"], status=RunStatus.QUEUED)
    ahead = ahead.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=run_id))
    return ahead.count() + 1


def run_queue_positions(*, owner_id: int) -> dict[int, int]:
    """``run_queue_position`` of every queued run of the owner, in one query: {run id: place}."""
    queued = (
        PipelineRun.objects.filter(task__project__owner_id=owner_id, status=RunStatus.QUEUED)
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
    )
    return {run_id: place for place, run_id in enumerate(queued, start=1)}


def ordinal(number: int) -> str:
    """1 → '1st', 2 → '2nd', 11 → '11th', 23 → '23rd'."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def queue_place_label(position: int | None) -> str:
    """'2nd in line', or '' for a run not waiting."""
    return f"{ordinal(position)} in line" if position else ""
