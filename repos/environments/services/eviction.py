"""Dropping kept environments: unused for too long, or over the cache's size; and
preparations whose worker died."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from ...models import PreparedEnvironment, PreparedEnvironmentStatus
from .. import store

# A preparation nobody has reported on for this long was left by a worker that died.
STALE_AFTER_SECONDS = 90


def environments_evict(*, keep: int | None = None) -> int:
    """Drop kept environments unused for ENVIRONMENT_MAX_AGE_DAYS, then the least
    recently used ones while all of them together are over ENVIRONMENT_CACHE_MAX_MB;
    the number dropped. Runs holding hard links of one keep their files."""
    now = timezone.now()
    ready = PreparedEnvironment.objects.filter(status=PreparedEnvironmentStatus.READY)
    if keep is not None:
        ready = ready.exclude(pk=keep)
    dropped = 0
    old = ready.filter(last_used_at__lt=now - timedelta(days=settings.ENVIRONMENT_MAX_AGE_DAYS))
    for prepared in old:
        dropped += _drop(prepared)
    limit = settings.ENVIRONMENT_CACHE_MAX_MB * 1024 * 1024
    total = (
        PreparedEnvironment.objects.filter(status=PreparedEnvironmentStatus.READY).aggregate(total=Sum("size_bytes"))[
            "total"
        ]
        or 0
    )
    for prepared in ready.order_by("last_used_at"):
        if total <= limit:
            break
        total -= prepared.size_bytes
        dropped += _drop(prepared)
    # Preparations whose worker died long ago.
    PreparedEnvironment.objects.filter(
        status=PreparedEnvironmentStatus.PREPARING,
        heartbeat_at__lt=now - timedelta(seconds=settings.ENVIRONMENT_SETUP_TIMEOUT_SECONDS + STALE_AFTER_SECONDS),
    ).update(status=PreparedEnvironmentStatus.FAILED, error="The worker preparing it stopped.")
    return dropped


def _drop(prepared: PreparedEnvironment) -> int:
    store.remove(store.prepared_folder(prepared.repository_id, prepared.key))
    return PreparedEnvironment.objects.filter(pk=prepared.pk, status=PreparedEnvironmentStatus.READY).delete()[0]
