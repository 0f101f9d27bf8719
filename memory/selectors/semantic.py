"""Reads of semantic memories: one by id, search by meaning, and the store's status."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypedDict, Unpack

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Count, F, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from accounts.models import User
from core.exceptions import NotFound
from core.selectors import one_or_not_found
from memory.decay import compute_confidence, fades_at
from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL, embed_text
from memory.models.semantic import DecayPolicy, Memory, MemoryCitedPath, MemorySource, MemoryUse
from memory.vector_query import NO_PROJECT, CandidateFilter
from memory.vector_store import vector_search
from projects.models import Project

MEMORY_NOT_FOUND = "Memory not found."


class MemoryNotFound(NotFound):
    code = "memory_not_found"


SEARCH_LIMIT_MAX = 50
# Near-duplicate candidates read for consolidation: search ranks by similarity ×
# confidence, so the most similar one may not be first.
CONSOLIDATE_CANDIDATES = 10
LATEST_USES = 3


@dataclass(frozen=True)
class MemorySearchResult:
    memory: Memory
    similarity: float
    confidence: float
    score: float
    # Recall: it cites a file the task touches (its score includes MEMORY_RECALL_PATH_BONUS).
    path_match: bool = False


def memory_confidence(*, memory: Memory, now: datetime | None = None) -> float:
    return compute_confidence(
        memory.decay_policy,
        memory.created_at,
        memory.last_reinforced_at,
        memory.half_life_hours,
        now or timezone.now(),
    )


def memory_fades_at(*, memory: Memory) -> datetime | None:
    """When the memory's confidence reaches 0 (faded); None for a permanent one."""
    return fades_at(memory.decay_policy, memory.created_at, memory.last_reinforced_at, memory.half_life_hours)


# Memory knows no runs (a run is an id here): the app that has them names them for the
# pages, e.g. "run 1 of task #3" (pipelines registers it at start-up).
RunNamer = Callable[[list[int]], dict[int, str]]
_run_namer: RunNamer | None = None


def memory_run_namer_register(namer: RunNamer) -> None:
    global _run_namer
    _run_namer = namer


def memory_run_names(*, run_ids: Iterable[int]) -> dict[int, str]:
    """A name for each run id: the registered namer's, else "run <id>"."""
    ids = sorted(set(run_ids))
    named = _run_namer(ids) if _run_namer is not None and ids else {}
    return {run_id: named.get(run_id) or f"run {run_id}" for run_id in ids}


def memory_source_label(*, memory: Memory, run_names: dict[int, str] | None = None) -> str:
    """Where a memory came from, in a few words; ``run_names`` from memory_run_names."""
    run_id = memory.source_run_id
    run = ((run_names or {}).get(run_id) or f"run {run_id}") if run_id else "a run"
    if memory.source == MemorySource.FEEDBACK:
        return f"Feedback on {run}"
    if memory.source == MemorySource.FINDING:
        return f"Review finding in {run}"
    if memory.source == MemorySource.AGENT:
        who = f"Agent {memory.agent}" if memory.agent else "An agent"
        return f"{who} in {run}" if memory.source_run_id else who
    if memory.source == MemorySource.DISTILLED:
        return f"Distilled from {run}"
    return "Written by a person"


def memory_sources(*, owner_id: int, memory_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """Where each of the owner's memories among ``memory_ids`` came from: its source,
    the run that wrote it, a label and the source note; whether a person deleted it."""
    memories = list(
        Memory.objects.filter(owner_id=owner_id, pk__in=set(memory_ids)).only(
            "id", "source", "source_run_id", "source_note", "agent", "is_deleted"
        )
    )
    run_names = memory_run_names(run_ids=[m.source_run_id for m in memories if m.source_run_id])
    return {
        memory.pk: {
            "source": memory.source,
            "source_run_id": memory.source_run_id,
            "source_label": memory_source_label(memory=memory, run_names=run_names),
            "source_note": memory.source_note,
            "deleted": memory.is_deleted,
        }
        for memory in memories
    }


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


def memory_list_for_user(
    *,
    user: User,
    project: Project | None = None,
    agent: str | None = None,
    source: str | None = None,
    q: str | None = None,
    include_faded: bool = False,
    now: datetime | None = None,
) -> QuerySet[Memory]:
    """The user's live memories, newest first; faded ones (confidence 0) only when asked.

    ``project`` must already be checked to be the user's.
    """
    memories = Memory.objects.filter(owner=user, is_deleted=False).select_related("project").defer("embedding")
    if project is not None:
        memories = memories.filter(project=project)
    if agent is not None:
        memories = memories.filter(agent=agent)
    if source is not None:
        memories = memories.filter(source=source)
    if q:
        memories = memories.filter(content__icontains=q)
    if not include_faded:
        # A half-life is per row, so "faded" is not one cut-off date: worked out from
        # the clock columns alone (no text, no embedding), then left out by id.
        now = now or timezone.now()
        clocks = memories.exclude(decay_policy=DecayPolicy.PERMANENT).values_list(
            "pk", "decay_policy", "created_at", "last_reinforced_at", "half_life_hours"
        )
        faded = [
            pk
            for pk, policy, created_at, reinforced_at, half_life in clocks
            if compute_confidence(policy, created_at, reinforced_at, half_life, now) <= 0.0
        ]
        if faded:
            memories = memories.exclude(pk__in=faded)
    return memories.order_by("-created_at", "-id")


@dataclass
class MemoryUses:
    count: int = 0
    latest: list[MemoryUse] = field(default_factory=list)


def memory_uses_for(*, memory_ids: Iterable[int], latest: int = LATEST_USES) -> dict[int, MemoryUses]:
    """For each memory: how many runs' uses are recorded and the latest few (two queries
    for any number of memories)."""
    ids = list(memory_ids)
    uses: dict[int, MemoryUses] = {pk: MemoryUses() for pk in ids}
    if not ids:
        return uses
    counts = MemoryUse.objects.filter(memory_id__in=ids).values_list("memory_id").annotate(n=Count("id"))
    for memory_id, n in counts:
        uses[memory_id].count = n
    ranked = (
        MemoryUse.objects.filter(memory_id__in=ids)
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("memory_id")], order_by=[F("used_at").desc(), F("id").desc()])
        )
        .filter(rank__lte=latest)
        .order_by("memory_id", "-used_at", "-id")
    )
    for use in ranked:
        uses[use.memory_id].latest.append(use)
    return uses


def memory_ids_used_by_run(*, owner: User, run_id: int) -> list[int]:
    """The ids of the owner's memories that run ``run_id`` was given, in id order."""
    return list(
        MemoryUse.objects.filter(run_id=run_id, memory__owner=owner)
        .values_list("memory_id", flat=True)
        .distinct()
        .order_by("memory_id")
    )


def memory_uses_get(*, memory: Memory, latest: int = LATEST_USES) -> MemoryUses:
    return memory_uses_for(memory_ids=[memory.pk], latest=latest)[memory.pk]


def memory_most_similar(
    *,
    owner: User,
    vector: np.ndarray,
    memory_type: str,
    agent: str,
    personality: str,
    project: Project | None,
    is_global: bool,
    min_similarity: float,
    now: datetime,
) -> Memory | None:
    """The live, unfaded memory of exactly this scope and type most similar to
    ``vector``, if it is at least ``min_similarity`` similar."""
    candidate_filter = CandidateFilter(
        now_ts=now.timestamp(),
        owner_id=owner.pk,
        agent=agent,
        personality=personality,
        memory_type=memory_type,
        project_id=NO_PROJECT if project is None else project.pk,
        is_global=is_global,
        # Strictly above 0: a faded memory is not brought back by a near-duplicate.
        min_confidence=sys.float_info.min,
    )
    hits = [
        hit
        for hit in vector_search(vector, CONSOLIDATE_CANDIDATES, candidate_filter)
        if hit.similarity >= min_similarity
    ]
    if not hits:
        return None
    best = min(hits, key=lambda hit: (-hit.similarity, hit.memory_id))
    return Memory.objects.filter(pk=best.memory_id, owner=owner, is_deleted=False).first()


class SearchFilters(TypedDict, total=False):
    """memory_search_vector's arguments besides the user and the vector."""

    limit: int
    min_confidence: float
    agent: str | None
    personality: str | None
    project_id: int | None
    memory_type: str | None
    is_global: bool | None
    project_or_global: int | None
    agent_in: tuple[str, ...] | None
    not_from_run: int | None
    path_scoped: bool | None
    ids_in: tuple[int, ...] | None
    now: datetime | None


def memory_search(*, user: User, query: str, **filters: Unpack[SearchFilters]) -> list[MemorySearchResult]:
    """The user's live memories closest in meaning to ``query``: memory_search_vector
    with the query's embedding."""
    return memory_search_vector(user=user, query_vec=embed_text(query), **filters)


def memory_search_vector(
    *,
    user: User,
    query_vec: np.ndarray,
    limit: int = 10,
    min_confidence: float = 0.0,
    agent: str | None = None,
    personality: str | None = None,
    project_id: int | None = None,
    memory_type: str | None = None,
    is_global: bool | None = None,
    project_or_global: int | None = None,
    agent_in: tuple[str, ...] | None = None,
    not_from_run: int | None = None,
    path_scoped: bool | None = None,
    ids_in: tuple[int, ...] | None = None,
    now: datetime | None = None,
) -> list[MemorySearchResult]:
    """The user's live memories closest to ``query_vec``, ranked by similarity ×
    confidence; those under ``min_confidence`` are left out, and so are those run
    ``not_from_run`` wrote. ``project_or_global`` and ``agent_in`` admit several scopes
    at once (recall)."""
    now = now or timezone.now()
    candidate_filter = CandidateFilter(
        now_ts=now.timestamp(),
        owner_id=user.pk,
        agent=agent,
        personality=personality,
        project_id=project_id,
        memory_type=memory_type,
        is_global=is_global,
        min_confidence=min_confidence,
        project_or_global=project_or_global,
        agent_in=agent_in,
        not_from_run=not_from_run,
        path_scoped=path_scoped,
        ids_in=ids_in,
    )
    hits = vector_search(query_vec, limit, candidate_filter)
    rows = Memory.objects.select_related("project").defer("embedding").in_bulk([hit.memory_id for hit in hits])
    results = []
    for hit in hits:
        memory = rows.get(hit.memory_id)
        # Gone or deleted in the moment since the search: left out.
        if memory is None or memory.is_deleted:
            continue
        results.append(
            MemorySearchResult(memory=memory, similarity=hit.similarity, confidence=hit.confidence, score=hit.score)
        )
    return results


def memory_status(*, user: User) -> dict[str, object]:
    counts = Memory.objects.filter(owner=user).aggregate(
        memories=Count("id", filter=Q(is_deleted=False)), deleted=Count("id", filter=Q(is_deleted=True))
    )
    searchable = Memory.objects.filter(owner=user, is_deleted=False, embedding_model=EMBEDDING_MODEL).count()
    return {
        "embedding_model": EMBEDDING_MODEL,
        "dimensions": DIMENSIONS,
        "memories": counts["memories"],
        "deleted": counts["deleted"],
        "index_size": searchable,
        "vector_store": "pgvector-exact" if connection.vendor == "postgresql" else "sqlite-numpy-exact",
    }


# --- Recall: the memories an agent is given before it is called -----------------------------


# A task touching more files than this is matched on these many (sorted) only.
RECALL_PATHS_MAX = 500


def memory_ids_citing(*, user: User, paths: Iterable[str]) -> tuple[int, ...]:
    """The user's memories whose citations name one of ``paths`` — by its path, or, for a
    bare file name as a task's text gives one ("feature.py"), by the file's name in any
    folder. One indexed query (MemoryCitedPath); none at all without paths."""
    touched = sorted({path for path in paths if path})[:RECALL_PATHS_MAX]
    if not touched:
        return ()
    names = [path for path in touched if "/" not in path]
    rows = MemoryCitedPath.objects.filter(owner=user).filter(Q(path__in=touched) | Q(name__in=names))
    return tuple(sorted(set(rows.values_list("memory_id", flat=True))))


def memory_recall(
    *,
    user: User,
    project: Project | None,
    agent: str,
    query: str,
    paths: Iterable[str] = (),
    limit: int | None = None,
    min_score: float | None = None,
    not_from_run: int | None = None,
    now: datetime | None = None,
) -> list[MemorySearchResult]:
    """The user's live memories that fit an agent's call on ``project``, best first.

    In scope: the project's memories and the global ones; of those, the ones scoped to
    ``agent`` and the ones scoped to no agent. Ranked by similarity × confidence; a
    memory scoring under ``min_score`` (default MEMORY_RECALL_MIN_SCORE) or faded to
    nothing is left out; at most ``limit`` (default MEMORY_RECALL_LIMIT). Memories that
    run ``not_from_run`` wrote are left out too: the run has what taught them in hand.

    A memory about some files only (``Memory.path_scoped``) is recalled only when the task
    touches one of them (``paths``); then the file it cites is the evidence: it is not
    held to ``min_score`` and ranks MEMORY_RECALL_PATH_BONUS higher. Stale ones never."""
    limit = settings.MEMORY_RECALL_LIMIT if limit is None else limit
    min_score = settings.MEMORY_RECALL_MIN_SCORE if min_score is None else min_score
    if limit <= 0 or not query.strip():
        return []
    # One embedding; the project's and the global memories, unscoped or the agent's.
    place: dict[str, Any] = {"is_global": True} if project is None else {"project_or_global": project.pk}
    common: dict[str, Any] = {
        "user": user,
        "query_vec": embed_text(query),
        "limit": limit,
        "agent_in": ("", agent),
        # Strictly above 0: a faded memory is not recalled, even at min_score 0.
        "min_confidence": sys.float_info.min,
        "not_from_run": not_from_run,
        "now": now or timezone.now(),
        **place,
    }
    # Everything that is left out is left out by the query, so ``limit`` are found when
    # there are that many; ranked by score, the ones under ``min_score`` come last.
    found = [result for result in memory_search_vector(path_scoped=False, **common) if result.score >= min_score]
    citing = memory_ids_citing(user=user, paths=paths)
    if citing:
        bonus = settings.MEMORY_RECALL_PATH_BONUS
        found += [
            replace(result, score=result.score + bonus, path_match=True)
            for result in memory_search_vector(path_scoped=True, ids_in=citing, **common)
        ]
    found.sort(key=lambda result: (-result.score, -result.similarity, -result.memory.pk))
    return found[:limit]
