"""Reads of semantic memories: one by id, search by meaning, and the store's status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from accounts.models import User
from core.exceptions import NotFound
from core.selectors import one_or_not_found
from memory.decay import compute_confidence
from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL, embed_text
from memory.models.semantic import Memory
from memory.vector_store import CandidateFilter, semantic_index

if TYPE_CHECKING:
    from projects.models import Project

MEMORY_NOT_FOUND = "Memory not found."


class MemoryNotFound(NotFound):
    code = "memory_not_found"


SEARCH_LIMIT_MAX = 50
# Searches in one memory_search when hits keep naming rows deleted outright; a cascade
# deletes them all at once, so the second attempt normally finds none.
SEARCH_ATTEMPTS = 3


@dataclass(frozen=True)
class MemorySearchResult:
    memory: Memory
    similarity: float
    confidence: float
    score: float


def memory_confidence(*, memory: Memory, now: datetime | None = None) -> float:
    return compute_confidence(
        memory.decay_policy,
        memory.created_at,
        memory.last_reinforced_at,
        memory.half_life_hours,
        now or timezone.now(),
    )


def memory_get_for_user(*, user: User, memory_id: object) -> Memory:
    """The user's memory (deleted ones too), or MemoryNotFound — also when it is
    someone else's."""
    memories = Memory.objects.select_related("project").filter(owner=user)
    return one_or_not_found(memories, memory_id, MEMORY_NOT_FOUND, error=MemoryNotFound)


def memory_list_recent(*, user: User, limit: int = 20) -> QuerySet[Memory]:
    return (
        Memory.objects.filter(owner=user, is_deleted=False)
        .select_related("project")
        .order_by("-created_at", "-id")[:limit]
    )


def memory_search(
    *,
    user: User,
    query: str,
    limit: int = 10,
    min_confidence: float = 0.0,
    agent: str | None = None,
    personality: str | None = None,
    project_id: int | None = None,
    memory_type: str | None = None,
    is_global: bool | None = None,
    now: datetime | None = None,
) -> list[MemorySearchResult]:
    """The user's live memories closest in meaning to ``query``, ranked by
    similarity × confidence; those under ``min_confidence`` are left out."""
    now = now or timezone.now()
    query_vec = embed_text(query)
    candidate_filter = CandidateFilter(
        now_ts=now.timestamp(),
        owner_id=user.pk,
        agent=agent,
        personality=personality,
        project_id=project_id,
        memory_type=memory_type,
        is_global=is_global,
        min_confidence=min_confidence,
    )
    index = semantic_index()
    for _ in range(SEARCH_ATTEMPTS):
        hits = index.search(query_vec, limit, candidate_filter)
        rows = Memory.objects.select_related("project").in_bulk([hit.memory_id for hit in hits])
        # A hit without a row was deleted outright (a cascade), which the index notices
        # only at its next recount: forget it and search again, so the results are full.
        gone = [hit.memory_id for hit in hits if hit.memory_id not in rows]
        if not gone:
            break
        index.discard(gone)
    # The database stays the authority: a row deleted since the sync is dropped, and
    # confidence is recomputed from the row itself.
    results = []
    for hit in hits:
        memory = rows.get(hit.memory_id)
        if memory is None or memory.is_deleted or memory.owner_id != user.pk:
            continue
        confidence = memory_confidence(memory=memory, now=now)
        if confidence < min_confidence:
            continue
        results.append(
            MemorySearchResult(
                memory=memory, similarity=hit.similarity, confidence=confidence, score=hit.similarity * confidence
            )
        )
    results.sort(key=lambda r: (-r.score, -r.similarity, -r.memory.pk))
    return results


def memory_status(*, user: User) -> dict[str, object]:
    counts = Memory.objects.filter(owner=user).aggregate(
        memories=Count("id", filter=Q(is_deleted=False)), deleted=Count("id", filter=Q(is_deleted=True))
    )
    index = semantic_index()
    index.sync(recount=True)
    return {
        "embedding_model": EMBEDDING_MODEL,
        "dimensions": DIMENSIONS,
        "memories": counts["memories"],
        "deleted": counts["deleted"],
        "index_size": len(index),
        "vector_store": "numpy-exact",
    }


# --- Recall: the memories an agent is given before it is called -----------------------------


def memory_recall(
    *,
    user: User,
    project: Project | None,
    agent: str,
    query: str,
    limit: int | None = None,
    min_score: float | None = None,
    now: datetime | None = None,
) -> list[MemorySearchResult]:
    """The user's live memories that fit an agent's call on ``project``, best first.

    In scope: the project's memories and the global ones; of those, the ones scoped to
    ``agent`` and the ones scoped to no agent. Ranked by similarity × confidence; a
    memory scoring under ``min_score`` (default MEMORY_RECALL_MIN_SCORE) or faded to
    nothing is left out; at most ``limit`` (default MEMORY_RECALL_LIMIT)."""
    limit = settings.MEMORY_RECALL_LIMIT if limit is None else limit
    min_score = settings.MEMORY_RECALL_MIN_SCORE if min_score is None else min_score
    if limit <= 0 or not query.strip():
        return []
    now = now or timezone.now()
    # The index filters are exact, so each scope is one search; the best of them win.
    places: list[dict[str, Any]] = [{"is_global": True}]
    if project is not None:
        places.append({"project_id": project.pk})
    agents = {"", agent}
    found: dict[int, MemorySearchResult] = {}
    for place in places:
        for scoped_agent in agents:
            for result in memory_search(user=user, query=query, limit=limit, agent=scoped_agent, now=now, **place):
                if result.confidence > 0 and result.score >= min_score:
                    found[result.memory.pk] = result
    ranked = sorted(found.values(), key=lambda r: (-r.score, -r.similarity, -r.memory.pk))
    return ranked[:limit]
