"""Celery jobs of the accounts app: thin wrappers around services."""

from __future__ import annotations

from celery import shared_task

from .services import sessions_clear_expired


@shared_task
def clear_expired_sessions() -> int:
    """Periodic (CELERY_BEAT_SCHEDULE): delete expired sessions, return how many went."""
    return sessions_clear_expired()
