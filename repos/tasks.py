"""Celery tasks of repositories: thin, ids only, idempotent."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(acks_late=True, ignore_result=True)
def repository_clone_run(repository_id: int) -> None:
    services.repository_clone_execute(repository_id=repository_id)
