"""Celery tasks of repositories: thin, ids only, idempotent. Each imports the service it
runs inside the task; services queue these by name (core/jobs.py)."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def repository_clone_run(repository_id: int) -> None:
    from .services import repository_clone_execute

    repository_clone_execute(repository_id=repository_id)
