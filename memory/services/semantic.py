"""Writes of semantic memories: create (with dedup and consolidation), reinforce, edit,
pin, soft delete, and the record of which runs were given them.

Every write sets ``updated_at`` — also in ``QuerySet.update``, which auto_now does not
touch — so that the row says when it last changed (the admin, the API).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import User
from core.exceptions import ApplicationError
from memory.citations import (
    Citation,
    citations_from_json,
    cited_paths,
)
from memory.embeddings import EMBEDDING_MODEL, embed_text
from memory.models.semantic import (
    APPLIES_WHEN_MAX_LENGTH,
    MEMORY_MAX_LENGTH,
    SOURCE_NOTE_MAX_LENGTH,
    DecayPolicy,
    Memory,
    MemoryCitedPath,
    MemorySource,
    MemoryUse,
)
from memory.owner_vectors import owner_vectors_changed
from memory.selectors.semantic import MEMORY_NOT_FOUND, MemoryNotFound, memory_most_similar
from projects.models import Project

CANNOT_REINFORCE_PERMANENT = "A permanent memory does not fade: there is nothing to reinforce."
CANNOT_REINFORCE_DELETED = "A deleted memory cannot be reinforced."
CANNOT_REINFORCE_STALE = (
    "A stale memory cannot be reinforced: the code it cites is gone. Apply it to the whole project to give it again."
)
EMPTY_CONTENT = "A memory needs some text."
BAD_HALF_LIFE = "The half-life must be more than 0 hours."
CONTENT_TOO_LONG = f"A memory is at most {MEMORY_MAX_LENGTH:,} characters."
CANNOT_EDIT_DELETED = "A deleted memory cannot be edited."
CANNOT_PIN_DELETED = "A deleted memory cannot be pinned or unpinned."
APPLIES_WHEN_TOO_LONG = f"The line saying when a memory applies is at most {APPLIES_WHEN_MAX_LENGTH} characters."


class InvalidOperation(ApplicationError):
    code = "invalid_operation"


def normalise_content(content: str) -> str:
    """What makes two memories "the same text": case and whitespace do not count."""
    return " ".join(content.split()).casefold()


def content_hash(content: str) -> str:
    return hashlib.sha256(normalise_content(content).encode()).hexdigest()


APPLIES_WHEN_LABEL = "Applies when:"


def memory_embedding_text(content: str, applies_when: str = "") -> str:
    """What a memory's embedding is made of: its content, and the line saying when it
    applies, which a task's words match more often than the lesson's own
    (bench/bench_memory_retrieval.py measures it)."""
    applies_when = " ".join(applies_when.split())
    return f"{content}\n{APPLIES_WHEN_LABEL} {applies_when}" if applies_when else content


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


def memory_cited_paths_keep(memory: Memory, citations: Sequence[Citation]) -> None:
    """Keep the memory's MemoryCitedPath rows in step with ``citations``."""
    MemoryCitedPath.objects.filter(memory_id=memory.pk).delete()
    MemoryCitedPath.objects.bulk_create(
        MemoryCitedPath(memory_id=memory.pk, owner_id=memory.owner_id, path=path[:1000], name=name[:255])
        for path, name in cited_paths(citations)
    )


def _reinforce_existing(
    memory: Memory, *, now: datetime, citations: Sequence[Citation] = (), path_scoped: bool = False
) -> Memory:
    """The same lesson learned again: its clock starts again, and where it was learned is
    added to its citations. It stays about its files only while every time it was learned
    it was (a lesson said once for the whole project is for the whole project)."""
    if memory.decay_policy != DecayPolicy.PERMANENT:
        Memory.objects.filter(pk=memory.pk, is_deleted=False).update(
            last_reinforced_at=now, reinforce_count=F("reinforce_count") + 1, updated_at=now
        )
    known = citations_from_json(memory.citations)
    added = [c for c in citations if not any((c.path, c.hash) == (k.path, k.hash) for k in known)]
    if added or (memory.path_scoped and not path_scoped):
        merged = [*known, *added]
        with transaction.atomic():
            Memory.objects.filter(pk=memory.pk).update(
                citations=[citation.as_dict() for citation in merged],
                path_scoped=memory.path_scoped and path_scoped,
                updated_at=now,
            )
            memory_cited_paths_keep(memory, merged)
    memory.refresh_from_db()
    return memory


def _consolidate(
    memory: Memory,
    *,
    content: str,
    applies_when: str,
    digest: str,
    vector: np.ndarray,
    now: datetime,
    citations: Sequence[Citation],
    path_scoped: bool,
) -> Memory:
    """A near-duplicate was written: reinforce ``memory``, keeping the newer wording
    when it says more (its line and embedding come with it)."""
    memory = _reinforce_existing(memory, now=now, citations=citations, path_scoped=path_scoped)
    if len(content) > len(memory.content):
        Memory.objects.filter(pk=memory.pk).update(
            content=content,
            content_hash=digest,
            applies_when=applies_when,
            embedding=vector,
            embedding_model=EMBEDDING_MODEL,
            updated_at=now,
        )
        owner_vectors_changed(memory.owner_id, [memory.pk])
        memory.refresh_from_db()
    return memory


class MemoryWrite(NamedTuple):
    """What memory_create did: ``created`` a new row, or returned an existing one —
    ``consolidated`` into it when the text was only similar, not the same."""

    memory: Memory
    created: bool
    consolidated: bool = False


def memory_create(
    *,
    owner: User,
    content: str,
    applies_when: str = "",
    memory_type: str = "note",
    decay_policy: str = DecayPolicy.REINFORCEABLE,
    half_life_hours: float | None = None,
    agent: str = "",
    personality: str = "",
    project: Project | None = None,
    is_global: bool = False,
    source: str = MemorySource.PERSON,
    source_run_id: int | None = None,
    source_note: str = "",
    citations: Sequence[Citation] = (),
    path_scoped: bool = False,
    now: datetime | None = None,
) -> MemoryWrite:
    """Store a memory — the one way memories are written (page, API, pipeline).

    The same text (normalised) already stored in the same scope (owner, agent,
    personality, project, global) is reinforced and returned. So is a live, unfaded
    memory of that scope and type at least MEMORY_CONSOLIDATE_SIMILARITY similar in
    meaning: it takes the new wording if that is longer. Its source stays the first one's.

    ``citations``: where in the code it was learned (memory.citations); ``path_scoped``:
    it is about those files only (a memory without citations cannot be).

    ``applies_when`` says when the lesson applies (the kinds of tasks and files it is
    for); it is embedded with the content. ``project`` must already be checked to be the
    owner's. A ``source_note`` over SOURCE_NOTE_MAX_LENGTH, or an ``applies_when`` over
    APPLIES_WHEN_MAX_LENGTH, is shortened, not refused: a run never fails for its note.
    """
    path_scoped = path_scoped and bool(citations)
    fixed_clock = now is not None
    now = now or timezone.now()
    content = content.strip()
    if not content:
        raise InvalidOperation(EMPTY_CONTENT, extra={"fields": {"content": [EMPTY_CONTENT]}})
    if len(content) > MEMORY_MAX_LENGTH:
        raise InvalidOperation(CONTENT_TOO_LONG, extra={"fields": {"content": [CONTENT_TOO_LONG]}})
    if half_life_hours is not None and half_life_hours <= 0:
        raise InvalidOperation(BAD_HALF_LIFE, extra={"fields": {"half_life_hours": [BAD_HALF_LIFE]}})
    source_note = memory_text_shortened(source_note.strip(), SOURCE_NOTE_MAX_LENGTH)
    applies_when = memory_text_shortened(" ".join(applies_when.split()), APPLIES_WHEN_MAX_LENGTH)
    digest = content_hash(content)
    scope: dict[str, Any] = {"agent": agent, "personality": personality, "project": project, "is_global": is_global}

    cited: dict[str, Any] = {"citations": citations, "path_scoped": path_scoped}
    existing = _same_scope(owner=owner, digest=digest, **scope)
    if existing is not None:
        return MemoryWrite(_reinforce_existing(existing, now=now, **cited), created=False)

    # Embedding is slow CPU work: done before the transaction, never holding a lock.
    vector = embed_text(memory_embedding_text(content, applies_when))
    if not fixed_clock:
        now = timezone.now()  # the memory is as new as its row, not as the request

    with transaction.atomic():
        # One writer per owner at a time, so two identical (or near-identical) creates
        # cannot both insert.
        User.objects.select_for_update().filter(pk=owner.pk).first()
        existing = _same_scope(owner=owner, digest=digest, **scope)
        if existing is not None:
            return MemoryWrite(_reinforce_existing(existing, now=now, **cited), created=False)
        similar = memory_most_similar(
            owner=owner,
            vector=vector,
            memory_type=memory_type,
            min_similarity=settings.MEMORY_CONSOLIDATE_SIMILARITY,
            now=now,
            **scope,
        )
        if similar is not None:
            memory = _consolidate(
                similar, content=content, applies_when=applies_when, digest=digest, vector=vector, now=now, **cited
            )
            return MemoryWrite(memory, created=False, consolidated=True)
        memory = Memory(
            owner=owner,
            content=content,
            applies_when=applies_when,
            content_hash=digest,
            memory_type=memory_type,
            decay_policy=decay_policy,
            created_at=now,
            last_reinforced_at=now,
            embedding=vector,
            embedding_model=EMBEDDING_MODEL,
            source=source,
            source_run_id=source_run_id,
            source_note=source_note,
            citations=[citation.as_dict() for citation in citations],
            path_scoped=path_scoped,
            **scope,
        )
        if half_life_hours is not None:
            memory.half_life_hours = half_life_hours
        memory.full_clean()
        memory.save()
        owner_vectors_changed(owner.pk, [memory.pk])
        memory_cited_paths_keep(memory, citations)
    return MemoryWrite(memory, created=True)


def memory_text_shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis: what a memory's writer
    shortens rather than refuses (a source note; a lesson from a run)."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def memory_reinforce(*, owner: User, memory_id: int, now: datetime | None = None) -> Memory:
    """Reset a memory's clock (last_reinforced_at = now) and count it."""
    now = now or timezone.now()
    with transaction.atomic():
        updated = (
            Memory.objects.filter(pk=memory_id, owner=owner, is_deleted=False, stale_at__isnull=True)
            .exclude(decay_policy=DecayPolicy.PERMANENT)
            .update(last_reinforced_at=now, reinforce_count=F("reinforce_count") + 1, updated_at=now)
        )
        memory = Memory.objects.filter(pk=memory_id, owner=owner).first()
    if memory is None:
        raise MemoryNotFound(MEMORY_NOT_FOUND)
    if not updated:
        if memory.is_deleted:
            raise InvalidOperation(CANNOT_REINFORCE_DELETED)
        if memory.stale_at is not None:
            raise InvalidOperation(CANNOT_REINFORCE_STALE)
        raise InvalidOperation(CANNOT_REINFORCE_PERMANENT)
    return memory


def memory_reinforce_many(*, owner: User, memory_ids: Iterable[int], now: datetime | None = None) -> int:
    """Reinforce the owner's live, fading memories among ``memory_ids`` (a run that was
    given them was approved); deleted, stale and permanent ones are left as they are.
    Returns how many were reinforced."""
    now = now or timezone.now()
    return (
        Memory.objects.filter(pk__in=set(memory_ids), owner=owner, is_deleted=False, stale_at__isnull=True)
        .exclude(decay_policy=DecayPolicy.PERMANENT)
        .update(last_reinforced_at=now, reinforce_count=F("reinforce_count") + 1, updated_at=now)
    )


def memory_delete(*, owner: User, memory_id: int, now: datetime | None = None) -> None:
    """Soft delete: kept in the database, never found by search again. Idempotent."""
    now = now or timezone.now()
    with transaction.atomic():
        if not Memory.objects.filter(pk=memory_id, owner=owner).exists():
            raise MemoryNotFound(MEMORY_NOT_FOUND)
        Memory.objects.filter(pk=memory_id, owner=owner, is_deleted=False).update(
            is_deleted=True, deleted_at=now, updated_at=now
        )


def memory_update_content(
    *, owner: User, memory_id: int, content: str, applies_when: str | None = None, now: datetime | None = None
) -> Memory:
    """A person rewrites a memory (and, given, the line saying when it applies): new
    text, new embedding; its clock and count stay. ``applies_when=None`` keeps the line."""
    now = now or timezone.now()
    content = content.strip()
    if not content:
        raise InvalidOperation(EMPTY_CONTENT, extra={"fields": {"content": [EMPTY_CONTENT]}})
    if len(content) > MEMORY_MAX_LENGTH:
        raise InvalidOperation(CONTENT_TOO_LONG, extra={"fields": {"content": [CONTENT_TOO_LONG]}})
    if applies_when is None:
        current = Memory.objects.filter(pk=memory_id, owner=owner).values_list("applies_when", flat=True).first()
        applies_when = current or ""
    applies_when = " ".join(applies_when.split())
    if len(applies_when) > APPLIES_WHEN_MAX_LENGTH:
        raise InvalidOperation(APPLIES_WHEN_TOO_LONG, extra={"fields": {"applies_when": [APPLIES_WHEN_TOO_LONG]}})
    # Slow CPU work, outside the transaction.
    vector = embed_text(memory_embedding_text(content, applies_when))
    with transaction.atomic():
        updated = Memory.objects.filter(pk=memory_id, owner=owner, is_deleted=False).update(
            content=content,
            content_hash=content_hash(content),
            applies_when=applies_when,
            embedding=vector,
            embedding_model=EMBEDDING_MODEL,
            updated_at=now,
        )
        if updated:
            owner_vectors_changed(owner.pk, [memory_id])
        memory = Memory.objects.filter(pk=memory_id, owner=owner).first()
    if memory is None:
        raise MemoryNotFound(MEMORY_NOT_FOUND)
    if not updated:
        raise InvalidOperation(CANNOT_EDIT_DELETED)
    return memory


def memory_live_locked(*, owner: User, memory_id: int, deleted: str) -> Memory:
    """The owner's memory, locked for the transaction: MemoryNotFound when there is none,
    InvalidOperation(``deleted``) when it is deleted."""
    memory = Memory.objects.select_for_update().filter(pk=memory_id, owner=owner).first()
    if memory is None:
        raise MemoryNotFound(MEMORY_NOT_FOUND)
    if memory.is_deleted:
        raise InvalidOperation(deleted)
    return memory


def memory_pin(*, owner: User, memory_id: int, pinned: bool, now: datetime | None = None) -> Memory:
    """Pin: the memory becomes permanent. Unpin: back to the policy it had (reinforceable
    if it was made permanent), its clock starting now — a contextual one still counts
    from its creation. Pinning a pinned memory (or unpinning an unpinned one) changes
    nothing."""
    now = now or timezone.now()
    with transaction.atomic():
        memory = memory_live_locked(owner=owner, memory_id=memory_id, deleted=CANNOT_PIN_DELETED)
        is_pinned = memory.decay_policy == DecayPolicy.PERMANENT
        if pinned and not is_pinned:
            Memory.objects.filter(pk=memory.pk).update(
                unpinned_policy=memory.decay_policy, decay_policy=DecayPolicy.PERMANENT, updated_at=now
            )
        elif not pinned and is_pinned:
            Memory.objects.filter(pk=memory.pk).update(
                decay_policy=memory.unpinned_policy or DecayPolicy.REINFORCEABLE,
                unpinned_policy="",
                last_reinforced_at=now,
                updated_at=now,
            )
        memory.refresh_from_db()
    return memory


CANNOT_SHARE_DELETED = "A deleted memory cannot be shared or unshared."
CANNOT_UNSHARE_WITHOUT_PROJECT = "This memory belongs to no project: shared with none, no agent would be given it."


def memory_share(*, owner: User, memory_id: int, shared: bool, now: datetime | None = None) -> Memory:
    """Share a memory with every project of its owner (global) or keep it to its own
    project again. A lesson belongs to the project that taught it until a person shares
    it; one of no project cannot be unshared (it would reach no agent at all)."""
    now = now or timezone.now()
    with transaction.atomic():
        memory = memory_live_locked(owner=owner, memory_id=memory_id, deleted=CANNOT_SHARE_DELETED)
        if not shared and memory.project_id is None:
            raise InvalidOperation(CANNOT_UNSHARE_WITHOUT_PROJECT)
        if memory.is_global != shared:
            Memory.objects.filter(pk=memory.pk).update(is_global=shared, updated_at=now)
            memory.refresh_from_db()
    return memory


def memory_uses_record(
    *, owner: User, memory_ids: Iterable[int], run_id: int, agent: str, now: datetime | None = None
) -> int:
    """Record that run ``run_id``'s ``agent`` was given these memories. Ids that are not
    the owner's (or no longer exist) are ignored. Returns how many uses were recorded."""
    now = now or timezone.now()
    ids = set(Memory.objects.filter(owner=owner, pk__in=set(memory_ids)).values_list("pk", flat=True))
    with transaction.atomic():
        MemoryUse.objects.bulk_create(
            MemoryUse(memory_id=pk, run_id=run_id, agent=agent[:50], used_at=now) for pk in sorted(ids)
        )
    return len(ids)
