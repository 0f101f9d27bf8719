"""Celery jobs of the context store and agent notes: thin, ids only, idempotent. Each
imports the service it runs inside the job; services queue these by name (core/jobs.py)."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def memory_cleanup_contexts() -> int:
    from memory.services.context import context_delete_expired

    return context_delete_expired()


@shared_task(ignore_result=True)
def memory_cleanup_daily() -> int:
    from memory.services.notes import daily_cleanup_old

    return daily_cleanup_old()


@shared_task(acks_late=True, ignore_result=True)
def memory_summarise_note(note_id: int) -> bool:
    from memory.services.notes import notes_summarise

    return notes_summarise(note_id=note_id)


@shared_task(ignore_result=True)
def memory_summarise_notes() -> int:
    from memory.services.notes import notes_summarise_long

    return notes_summarise_long()
