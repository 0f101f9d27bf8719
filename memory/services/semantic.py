"""Writes of semantic memories: create (with dedup), reinforce, soft delete.

Every write sets ``updated_at`` — also in ``QuerySet.update``, which auto_now does not
touch — because the search index of every process syncs by it (memory.vector_store).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import User
from core.exceptions import ApplicationError
from memory.embeddings import EMBEDDING_MODEL, embed_text, vector_to_bytes
from memory.models.semantic import DecayPolicy, Memory
from memory.selectors.semantic import MEMORY_NOT_FOUND, MemoryNotFound
from projects.models import Project

CANNOT_REINFORCE_PERMANENT = "A permanent memory does not fade: there is nothing to reinforce."
CANNOT_REINFORCE_DELETED = "A deleted memory cannot be reinforced."
EMPTY_CONTENT = "A memory needs some text."
BAD_HALF_LIFE = "The half-life must be more than 0 hours."


class InvalidOperation(ApplicationError):
    code = "invalid_operation"


def normalise_content(content: str) -> str:
    """What makes two memories "the same text": case and whitespace do not count."""
    return " ".join(content.split()).casefold()


def content_hash(content: str) -> str:
    return hashlib.sha256(normalise_content(content).encode()).hexdigest()


def _same_scope(
    *, owner: User, digest: str, agent: str, personality: str, project: Project | None, is_global: bool
) -> Memory | None:
    return (
        Memory.objects.filter(
            owner=owner,
            content_hash=digest,
            agent=agent,
            personality=personality,
            project=project,
            is_global=is_global,
            is_deleted=False,
        )
        .order_by("id")
        .first()
    )


def _reinforce_existing(memory: Memory, *, now: datetime) -> Memory:
    if memory.decay_policy != DecayPolicy.PERMANENT:
        Memory.objects.filter(pk=memory.pk, is_deleted=False).update(
            last_reinforced_at=now, reinforce_count=F("reinforce_count") + 1, updated_at=now
        )
        memory.refresh_from_db()
    return memory


def memory_create(
    *,
    owner: User,
    content: str,
    memory_type: str = "note",
    decay_policy: str = DecayPolicy.REINFORCEABLE,
    half_life_hours: float | None = None,
    agent: str = "",
    personality: str = "",
    project: Project | None = None,
    is_global: bool = False,
    now: datetime | None = None,
) -> tuple[Memory, bool]:
    """Store a memory, or — if the same text (normalised) is already stored in the same
    scope — reinforce and return that one. Returns (memory, created).

    ``project`` must already be checked to be the owner's.
    """
    now = now or timezone.now()
    content = content.strip()
    if not content:
        raise InvalidOperation(EMPTY_CONTENT, extra={"fields": {"content": [EMPTY_CONTENT]}})
    if half_life_hours is not None and half_life_hours <= 0:
        raise InvalidOperation(BAD_HALF_LIFE, extra={"fields": {"half_life_hours": [BAD_HALF_LIFE]}})
    digest = content_hash(content)
    scope: dict[str, Any] = {"agent": agent, "personality": personality, "project": project, "is_global": is_global}

    existing = _same_scope(owner=owner, digest=digest, **scope)
    if existing is not None:
        return _reinforce_existing(existing, now=now), False

    # Embedding is slow CPU work: done before the transaction, never holding a lock.
    vector = embed_text(content)

    with transaction.atomic():
        # One writer per owner at a time, so two identical creates cannot both insert.
        User.objects.select_for_update().filter(pk=owner.pk).first()
        existing = _same_scope(owner=owner, digest=digest, **scope)
        if existing is not None:
            return _reinforce_existing(existing, now=now), False
        memory = Memory(
            owner=owner,
            content=content,
            content_hash=digest,
            memory_type=memory_type,
            decay_policy=decay_policy,
            created_at=now,
            last_reinforced_at=now,
            embedding=vector_to_bytes(vector),
            embedding_model=EMBEDDING_MODEL,
            **scope,
        )
        if half_life_hours is not None:
            memory.half_life_hours = half_life_hours
        memory.full_clean()
        memory.save()
    return memory, True


def memory_reinforce(*, owner: User, memory_id: int, now: datetime | None = None) -> Memory:
    """Reset a memory's clock (last_reinforced_at = now) and count it."""
    now = now or timezone.now()
    with transaction.atomic():
        updated = (
            Memory.objects.filter(pk=memory_id, owner=owner, is_deleted=False)
            .exclude(decay_policy=DecayPolicy.PERMANENT)
            .update(last_reinforced_at=now, reinforce_count=F("reinforce_count") + 1, updated_at=now)
        )
        memory = Memory.objects.filter(pk=memory_id, owner=owner).first()
    if memory is None:
        raise MemoryNotFound(MEMORY_NOT_FOUND)
    if not updated:
        if memory.is_deleted:
            raise InvalidOperation(CANNOT_REINFORCE_DELETED)
        raise InvalidOperation(CANNOT_REINFORCE_PERMANENT)
    return memory


def memory_delete(*, owner: User, memory_id: int, now: datetime | None = None) -> None:
    """Soft delete: kept in the database, never found by search again. Idempotent."""
    now = now or timezone.now()
    with transaction.atomic():
        if not Memory.objects.filter(pk=memory_id, owner=owner).exists():
            raise MemoryNotFound(MEMORY_NOT_FOUND)
        Memory.objects.filter(pk=memory_id, owner=owner, is_deleted=False).update(
            is_deleted=True, deleted_at=now, updated_at=now
        )
