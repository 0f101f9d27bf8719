"""Limits on runs at once: which of an owner's queued runs may start now, and a queued
run's place in line.

A run works (planning to fixing, WORKING_STATUSES) only while its owner has fewer than
RUNS_AT_ONCE_PER_USER runs working and its project fewer than its ``runs_at_once`` (or
RUNS_AT_ONCE_PER_PROJECT); runs awaiting approval or paused do not count. Over either
limit a run waits queued. The owner's queued runs take free places oldest first: a run
never overtakes an older one that could start, but a run whose own project is full does
not hold up a younger run of another project of the same owner.

``pipelines.services.run_begin`` decides under a lock on the owner's row; a run leaving
a working status queues the runs that may then start (``run_transition``, on commit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Q

from .models import WORKING_STATUSES, PipelineRun, RunStatus


def runs_free_to_start(*, owner_id: int) -> list[int]:
    """The owner's queued runs that may start now, oldest first (ids)."""
    working = Counter(
        PipelineRun.objects.filter(task__project__owner_id=owner_id, status__in=WORKING_STATUSES)
        .order_by()
        .values_list("task__project_id", flat=True)
    )
    owner_working = sum(working.values())
    per_user = settings.RUNS_AT_ONCE_PER_USER
    queued = (
        PipelineRun.objects.filter(task__project__owner_id=owner_id, status=RunStatus.QUEUED)
        .order_by("created_at", "id")
        .values_list("pk", "task__project_id", "task__project__runs_at_once")
    )
    free: list[int] = []
    for run_id, project_id, project_limit in queued:
        if owner_working >= per_user:
            break
        if working[project_id] >= (project_limit or settings.RUNS_AT_ONCE_PER_PROJECT):
            continue  # its project is full: it waits, younger runs of other projects may go
        free.append(run_id)
        owner_working += 1
        working[project_id] += 1
    return free


def runs_waiting(*, run_ids: Iterable[int]) -> set[int]:
    """Those of ``run_ids`` that are queued and must wait (over a limit), for the sweeper."""
    run_ids = list(run_ids)
    if not run_ids:
        return set()
    owners = dict(
        PipelineRun.objects.filter(pk__in=run_ids, status=RunStatus.QUEUED).values_list("pk", "task__project__owner_id")
    )
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
