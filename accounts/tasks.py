"""Celery jobs of the accounts app: thin wrappers around services, imported inside the
job."""

from __future__ import annotations

from celery import shared_task


@shared_task
def clear_expired_sessions() -> int:
    """Periodic (CELERY_BEAT_SCHEDULE): delete expired sessions, return how many went."""
    from .services import sessions_clear_expired

    return sessions_clear_expired()
