"""The context store: JSON chunks passed between agents, deduplicated by content hash.

Access statistics are updated with one ``UPDATE … SET access_count = access_count + 1``
so concurrent readers never lose a count.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from core.exceptions import NotFound
from memory.models import ContextItem
from memory.selectors.context import CONTEXT_NOT_FOUND

if TYPE_CHECKING:
    from accounts.models import User

CONTENT_MAX_BYTES = 1024 * 1024
CONTENT_TOO_LARGE = "The content is larger than 1 MiB of JSON."
CONTENT_NOT_JSON = "The content is not JSON-serialisable."
PARENT_NOT_FOUND = "Unknown parent context item: {id}."
TYPE_REQUIRED = "A context item needs a type."


def canonical_json(content: Any) -> bytes:
    """The bytes that are hashed and stored: sorted keys, no whitespace."""
    try:
        return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError):
        raise ValidationError({"content": [CONTENT_NOT_JSON]}) from None


def context_decode(item: ContextItem) -> Any:
    raw = bytes(item.content)
    if item.compression == ContextItem.Compression.GZIP:
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _live(queryset: QuerySet[ContextItem], now: datetime | None = None) -> QuerySet[ContextItem]:
    return queryset.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now or timezone.now()))


def context_save(
    *,
    owner: User,
    type: str,
    content: Any,
    agent_id: str = "",
    compression: str = ContextItem.Compression.GZIP,
    parent_ids: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    ttl_seconds: int | None = None,
    run_id: int | None = None,
) -> tuple[ContextItem, bool]:
    """Save ``content`` and return ``(item, created)``. Identical content of the same
    owner is one item, whatever the compression: the existing one is returned.
    ``run_id``: the pipeline run whose lineage the item is part of, if any."""
    if not type:
        raise ValidationError({"type": [TYPE_REQUIRED]})
    raw = canonical_json(content)
    if len(raw) > CONTENT_MAX_BYTES:
        raise ValidationError({"content": [CONTENT_TOO_LARGE]})
    content_hash = hashlib.sha256(raw).hexdigest()
    existing = ContextItem.objects.filter(owner=owner, content_hash=content_hash).first()
    if existing is not None:
        return existing, False

    parents = list(dict.fromkeys(parent_ids or []))
    known = set(ContextItem.objects.filter(owner=owner, pk__in=parents).values_list("pk", flat=True))
    for parent in parents:
        if parent not in known:
            raise ValidationError({"parent_ids": [PARENT_NOT_FOUND.format(id=parent)]})

    now = timezone.now()
    if ttl_seconds is not None:
        expires_at = now + timedelta(seconds=ttl_seconds) if ttl_seconds > 0 else None
    else:
        expires_at = now + timedelta(days=settings.CONTEXT_TTL_DAYS) if settings.CONTEXT_TTL_DAYS > 0 else None
    stored = gzip.compress(raw, mtime=0) if compression == ContextItem.Compression.GZIP else raw
    item = ContextItem(
        id=f"ctx_{uuid.uuid4().hex}",
        owner=owner,
        run_id=run_id,
        type=type,
        agent_id=agent_id,
        content=stored,
        compression=compression,
        content_hash=content_hash,
        size_bytes=len(raw),
        parent_ids=parents,
        metadata=metadata or {},
        expires_at=expires_at,
    )
    item.full_clean(exclude=["content", "owner", "run"], validate_unique=False, validate_constraints=False)
    try:
        # A savepoint: losing the race leaves any outer transaction usable.
        with transaction.atomic():
            item.save(force_insert=True)
    except IntegrityError:
        winner = ContextItem.objects.filter(owner=owner, content_hash=content_hash).first()
        if winner is None:
            raise
        return winner, False
    return item, True


def _count_access(*, user: User, ids: list[str]) -> int:
    return _live(ContextItem.objects.filter(owner=user, pk__in=ids)).update(
        access_count=F("access_count") + 1, accessed_at=timezone.now()
    )


def context_get(*, user: User, context_id: str) -> ContextItem:
    """The item (one access counted); expired and other users' items are not found."""
    if not _count_access(user=user, ids=[context_id]):
        raise NotFound(CONTEXT_NOT_FOUND)
    return ContextItem.objects.select_related("run").get(pk=context_id)


def context_get_many(*, user: User, context_ids: list[str]) -> list[ContextItem]:
    """The user's live items among ``context_ids``, in that order (unknown ids skipped)."""
    ids = list(dict.fromkeys(context_ids))
    _count_access(user=user, ids=ids)
    found = {item.pk: item for item in _live(ContextItem.objects.filter(owner=user, pk__in=ids))}
    return [found[pk] for pk in ids if pk in found]


def context_touch(*, user: User, context_id: str) -> ContextItem:
    return context_get(user=user, context_id=context_id)


def context_delete_expired(*, now: datetime | None = None) -> int:
    deleted, _ = ContextItem.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted
