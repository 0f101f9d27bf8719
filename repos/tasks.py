"""Celery tasks of repositories: thin, ids only, idempotent. Each imports the service it
runs inside the task; services queue these by name (core/jobs.py)."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def repository_clone_run(repository_id: int) -> None:
    from .services.linking import repository_clone_execute

    repository_clone_execute(repository_id=repository_id)


@shared_task(acks_late=True, ignore_result=True)
def repository_prepare_environment(repository_id: int, commit: str) -> None:
    from .environments.services.rebuild import environment_prepare_in_background

    environment_prepare_in_background(repository_id=repository_id, commit=commit)


@shared_task(ignore_result=True)
def repository_evict_environments() -> None:
    from .environments.services.eviction import environments_evict

    environments_evict()
