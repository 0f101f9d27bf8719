"""Celery tasks of the chat: thin, ids only, idempotent (a session whose queue is
empty, or answered by another worker, is left alone). Each imports what it runs inside
the task; services queue these by name (core/jobs.py)."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def chat_answer_queue(session_id: int) -> int:
    from chat.worker import chat_queue_process

    return chat_queue_process(session_id=session_id)


@shared_task(ignore_result=True)
def chat_expire_sessions() -> int:
    """Close sessions idle past the TTL, and re-queue any queue left without a holder."""
    from chat.services import chat_queues_sweep, chat_sessions_expire

    chat_queues_sweep()
    return chat_sessions_expire()
