"""Celery jobs of the context store and agent notes: thin, ids only, idempotent."""

from __future__ import annotations

from celery import shared_task

from memory.services.context import context_delete_expired
from memory.services.notes import daily_cleanup_old, notes_summarise, notes_summarise_long


@shared_task(ignore_result=True)
def memory_cleanup_contexts() -> int:
    return context_delete_expired()


@shared_task(ignore_result=True)
def memory_cleanup_daily() -> int:
    return daily_cleanup_old()


@shared_task(acks_late=True, ignore_result=True)
def memory_summarise_note(note_id: int) -> bool:
    return notes_summarise(note_id=note_id)


@shared_task(ignore_result=True)
def memory_summarise_notes() -> int:
    return notes_summarise_long()
