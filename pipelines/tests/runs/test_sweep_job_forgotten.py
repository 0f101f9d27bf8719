"""The sweep job that beat once scheduled is forgotten by migration 0015: a database
scheduled before keeps no periodic task naming a job that no longer exists."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django_celery_beat.models import IntervalSchedule, PeriodicTask

pytestmark = pytest.mark.django_db

migration = importlib.import_module("pipelines.migrations.0015_forget_the_sweep_job")


def test_the_old_sweep_job_is_deleted_and_other_jobs_stay() -> None:
    every_minute = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="pipeline-sweep", task="pipelines.tasks.pipeline_sweep", interval=every_minute)
    PeriodicTask.objects.create(
        name="pipeline-cleanup-worktrees", task="pipelines.tasks.pipeline_cleanup_worktrees", interval=every_minute
    )

    migration.forget_the_sweep_job(apps, None)

    assert list(PeriodicTask.objects.values_list("task", flat=True)) == ["pipelines.tasks.pipeline_cleanup_worktrees"]


def test_no_worker_knows_the_old_job_any_more() -> None:
    from config.celery import app

    app.loader.import_default_modules()
    assert "pipelines.tasks.pipeline_advance" in app.tasks  # the app's jobs are loaded
    assert migration.OLD_JOB not in app.tasks
