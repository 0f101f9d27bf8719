"""The vector store behind semantic search, and the per-process index that feeds it.

Embeddings live in the database with each memory (``Memory.embedding``, float32). Search
runs in memory over an exact numpy index — the same on SQLite and PostgreSQL — that
``SemanticIndex.sync`` brings up to date from the database before every search, so a
memory added, reinforced or deleted by another process (a worker, another web process)
is seen at once:

* the ids and ``updated_at`` of rows at or after the last one seen, less an overlap for
  transactions that committed late, are read; only rows the index has not seen at that
  ``updated_at`` are loaded in full (soft-deleted ones removed);
* at most every ``MEMORY_INDEX_RECOUNT_SECONDS``, the count and id sum of live rows are
  compared with the index: a difference (rows deleted outright, a write that did not
  touch ``updated_at``) rebuilds the index from scratch. The count reads every live row,
  so it is not paid on every search; in between, ``memory_search`` drops hits whose row
  is gone (``SemanticIndex.discard``) and searches again.

Writers must therefore set ``updated_at`` on every change, also in ``QuerySet.update``
(memory.services.semantic does).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import numpy as np
from django.conf import settings
from django.db.models import Count, Sum

from memory.decay import clock_start, compute_confidence_array
from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL, vector_from_bytes
from memory.models.semantic import DecayPolicy, Memory

# A transaction may commit after one that started later: its rows carry an updated_at
# older than the newest one already seen. Re-reading this much of the past catches them.
SYNC_OVERLAP = timedelta(seconds=60)
# Ids whose full rows (with the embedding) are loaded per query while syncing.
SYNC_FETCH_CHUNK = 500
# A filter keeping fewer than 1/SELECTIVE_FILTER_RATIO of the rows is searched on a copy
# of those rows; a broader one by one product over the whole matrix, masked.
SELECTIVE_FILTER_RATIO = 8


@dataclass(frozen=True)
class VectorMeta:
    """What the index must know of a memory to filter and rank it without the database."""

    owner_id: int
    project_id: int | None
    agent: str
    personality: str
    memory_type: str
    is_global: bool
    permanent: bool
    clock_start_ts: float
    half_life_hours: float


# CandidateFilter.project_id for "memories of no project" (stored as this in the index).
NO_PROJECT = -1


@dataclass(frozen=True)
class CandidateFilter:
    """Exact filters; None means "any" (``project_id=NO_PROJECT``: of no project).
    ``now_ts`` (POSIX seconds) dates the confidences."""

    now_ts: float
    owner_id: int | None = None
    agent: str | None = None
    personality: str | None = None
    project_id: int | None = None
    memory_type: str | None = None
    is_global: bool | None = None
    min_confidence: float = 0.0
    # Recall's scope in one search (memory_recall): of this project or global, and of
    # any of these agents ("" = scoped to no agent).
    project_or_global: int | None = None
    agent_in: tuple[str, ...] | None = None


@dataclass(frozen=True)
class VectorHit:
    memory_id: int
    similarity: float
    confidence: float
    score: float


class VectorStore(Protocol):
    def add(self, memory_id: int, vector: np.ndarray, meta: VectorMeta) -> None: ...

    def update(self, memory_id: int, vector: np.ndarray, meta: VectorMeta) -> None: ...

    def remove(self, memory_id: int) -> None: ...

    def search(self, query_vec: np.ndarray, k: int, candidate_filter: CandidateFilter) -> list[VectorHit]:
        """The k best candidates by similarity × confidence, best first."""
        ...

    def __len__(self) -> int: ...


class NumpyVectorStore:
    """Exact search: one float32 matrix of unit vectors and parallel metadata arrays.

    Removal moves the last row into the hole, so rows stay dense. Not thread-safe on its
    own: SemanticIndex serialises access.
    """

    def __init__(self, dimensions: int = DIMENSIONS, capacity: int = 1024) -> None:
        self.dimensions = dimensions
        self._n = 0
        self._rows: dict[int, int] = {}
        self._codes: dict[str, int] = {}
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        def grow(old: np.ndarray | None, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
            new = np.zeros(shape, dtype=dtype)
            if old is not None:
                new[: self._n] = old[: self._n]
            return new

        get = self.__dict__.get
        self._vectors = grow(get("_vectors"), (capacity, self.dimensions), np.float32)
        self._ids = grow(get("_ids"), (capacity,), np.int64)
        self._owner = grow(get("_owner"), (capacity,), np.int64)
        self._project = grow(get("_project"), (capacity,), np.int64)
        self._agent = grow(get("_agent"), (capacity,), np.int32)
        self._personality = grow(get("_personality"), (capacity,), np.int32)
        self._type = grow(get("_type"), (capacity,), np.int32)
        self._global = grow(get("_global"), (capacity,), np.bool_)
        self._permanent = grow(get("_permanent"), (capacity,), np.bool_)
        self._start = grow(get("_start"), (capacity,), np.float64)
        self._half_life = grow(get("_half_life"), (capacity,), np.float64)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._rows

    def ids(self) -> np.ndarray:
        return self._ids[: self._n].copy()

    def _code(self, value: str) -> int:
        return self._codes.setdefault(value, len(self._codes))

    def _write(self, row: int, memory_id: int, vector: np.ndarray, meta: VectorMeta) -> None:
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vector.shape[0] != self.dimensions:
            raise ValueError(f"Expected {self.dimensions} dimensions, got {vector.shape[0]}.")
        self._vectors[row] = vector
        self._ids[row] = memory_id
        self._owner[row] = meta.owner_id
        self._project[row] = NO_PROJECT if meta.project_id is None else meta.project_id
        self._agent[row] = self._code(meta.agent)
        self._personality[row] = self._code(meta.personality)
        self._type[row] = self._code(meta.memory_type)
        self._global[row] = meta.is_global
        self._permanent[row] = meta.permanent
        self._start[row] = meta.clock_start_ts
        self._half_life[row] = meta.half_life_hours

    def add(self, memory_id: int, vector: np.ndarray, meta: VectorMeta) -> None:
        if memory_id in self._rows:
            self.update(memory_id, vector, meta)
            return
        if self._n == self._vectors.shape[0]:
            self._allocate(2 * self._vectors.shape[0])
        self._write(self._n, memory_id, vector, meta)
        self._rows[memory_id] = self._n
        self._n += 1

    def update(self, memory_id: int, vector: np.ndarray, meta: VectorMeta) -> None:
        row = self._rows.get(memory_id)
        if row is None:
            self.add(memory_id, vector, meta)
        else:
            self._write(row, memory_id, vector, meta)

    def remove(self, memory_id: int) -> None:
        row = self._rows.pop(memory_id, None)
        if row is None:
            return
        last = self._n - 1
        if row != last:
            for array in self._arrays():
                array[row] = array[last]
            self._rows[int(self._ids[row])] = row
        self._n = last

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self._vectors,
            self._ids,
            self._owner,
            self._project,
            self._agent,
            self._personality,
            self._type,
            self._global,
            self._permanent,
            self._start,
            self._half_life,
        )

    def _mask(self, f: CandidateFilter) -> np.ndarray | None:
        n = self._n
        mask = np.ones(n, dtype=bool)
        if f.owner_id is not None:
            mask &= self._owner[:n] == f.owner_id
        if f.project_id is not None:
            mask &= self._project[:n] == f.project_id
        if f.is_global is not None:
            mask &= self._global[:n] == f.is_global
        if f.project_or_global is not None:
            mask &= (self._project[:n] == f.project_or_global) | self._global[:n]
        if f.agent_in is not None:
            agent_codes = [self._codes[agent] for agent in f.agent_in if agent in self._codes]
            if not agent_codes:
                return None
            mask &= np.isin(self._agent[:n], agent_codes)
        for value, codes in ((f.agent, self._agent), (f.personality, self._personality), (f.memory_type, self._type)):
            if value is None:
                continue
            code = self._codes.get(value)
            if code is None:
                return None
            mask &= codes[:n] == code
        return mask

    def search(self, query_vec: np.ndarray, k: int, candidate_filter: CandidateFilter) -> list[VectorHit]:
        n = self._n
        if n == 0 or k <= 0:
            return []
        mask = self._mask(candidate_filter)
        if mask is None:
            return []
        count = int(np.count_nonzero(mask))
        if count == 0:
            return []
        query = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        now, floor = candidate_filter.now_ts, candidate_filter.min_confidence
        if count * SELECTIVE_FILTER_RATIO < n:
            # A narrow filter (one owner among many): copying its few rows out is cheaper
            # than multiplying the whole matrix.
            rows = np.flatnonzero(mask)
            similarity = self._vectors[rows] @ query
            confidence = compute_confidence_array(self._permanent[rows], self._start[rows], self._half_life[rows], now)
            keep = confidence >= floor
        else:
            # One matrix-vector product over every row (no copy of the matrix), the filter
            # applied as a mask on the scores.
            rows = None
            similarity = self._vectors[:n] @ query
            confidence = compute_confidence_array(self._permanent[:n], self._start[:n], self._half_life[:n], now)
            keep = mask & (confidence >= floor)
        kept = int(np.count_nonzero(keep))
        if kept == 0:
            return []
        similarity64 = similarity.astype(np.float64)
        score = np.where(keep, similarity64 * confidence, -np.inf)
        take = min(k, kept)
        if take < score.shape[0]:
            # Everything scoring at least the k-th best (ties included), ranked exactly below.
            threshold = np.partition(score, score.shape[0] - take)[score.shape[0] - take]
            top = np.flatnonzero(score >= threshold)
        else:
            top = np.flatnonzero(keep)
        ids = self._ids[top if rows is None else rows[top]]
        # Best score first; ties by similarity, then by the newer id: a stable order.
        order = np.lexsort((-ids, -similarity64[top], -score[top]))[:k]
        return [
            VectorHit(
                memory_id=int(ids[i]),
                similarity=float(similarity64[top[i]]),
                confidence=float(confidence[top[i]]),
                score=float(score[top[i]]),
            )
            for i in order
        ]


_SYNC_FIELDS = (
    "id",
    "owner_id",
    "project_id",
    "agent",
    "personality",
    "memory_type",
    "is_global",
    "decay_policy",
    "half_life_hours",
    "created_at",
    "last_reinforced_at",
    "is_deleted",
    "embedding",
    "embedding_model",
    "updated_at",
)


def _meta(row: dict[str, Any]) -> VectorMeta:
    start: datetime = clock_start(row["decay_policy"], row["created_at"], row["last_reinforced_at"])
    return VectorMeta(
        owner_id=row["owner_id"],
        project_id=row["project_id"],
        agent=row["agent"],
        personality=row["personality"],
        memory_type=row["memory_type"],
        is_global=row["is_global"],
        permanent=row["decay_policy"] == DecayPolicy.PERMANENT,
        clock_start_ts=start.timestamp(),
        half_life_hours=row["half_life_hours"],
    )


class SemanticIndex:
    """The process's index of live memories, kept in step with the database."""

    def __init__(self, model: str = EMBEDDING_MODEL, dimensions: int = DIMENSIONS) -> None:
        self.model = model
        self.dimensions = dimensions
        self._lock = threading.RLock()
        self.full_rebuilds = 0
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.store = NumpyVectorStore(self.dimensions)
            self._seen: dict[int, datetime] = {}
            self._id_sum = 0
            self._watermark: datetime | None = None
            self._built = False
            self._recounted_at = -math.inf

    def __len__(self) -> int:
        return len(self.store)

    def _live(self) -> Any:
        return Memory.objects.filter(is_deleted=False, embedding_model=self.model)

    def _apply(self, row: dict[str, Any]) -> None:
        memory_id = row["id"]
        if self._watermark is None or row["updated_at"] > self._watermark:
            self._watermark = row["updated_at"]
        vector = vector_from_bytes(row["embedding"]) if row["embedding"] is not None else None
        live = (
            not row["is_deleted"]
            and row["embedding_model"] == self.model
            and vector is not None
            and vector.shape[0] == self.dimensions
        )
        if not live:
            if memory_id in self.store:
                self.store.remove(memory_id)
                self._id_sum -= memory_id
            # Remembered too, so that the overlap does not load it again and again.
            self._seen[memory_id] = row["updated_at"]
            return
        if self._seen.get(memory_id) == row["updated_at"]:
            return
        if memory_id not in self.store:
            self._id_sum += memory_id
        assert vector is not None
        self.store.add(memory_id, vector, _meta(row))
        self._seen[memory_id] = row["updated_at"]

    def _rebuild(self) -> None:
        self.reset()
        self.full_rebuilds += 1
        for row in self._live().values(*_SYNC_FIELDS).iterator(chunk_size=2000):
            self._apply(row)
        self._built = True
        self._recounted_at = time.monotonic()

    def sync(self, *, recount: bool = False) -> None:
        """Bring the index up to date; ``recount`` forces the check for rows deleted
        outright, which otherwise runs at most every MEMORY_INDEX_RECOUNT_SECONDS."""
        with self._lock:
            if not self._built:
                self._rebuild()
                return
            # No ORDER BY: Memory's default ordering (-created_at) made SQLite walk the
            # created_at index over every row instead of the updated_at range (~20 ms a
            # search at 10,000 memories; bench_memory_retrieval.py).
            window = Memory.objects.order_by()
            if self._watermark is not None:
                window = window.filter(updated_at__gte=self._watermark - SYNC_OVERLAP)
            # Ids and times first: a row seen before with the same updated_at is skipped
            # without loading its embedding, so the overlap that catches late commits
            # costs a narrow index scan, not a re-read of every row written in the last
            # minute (after a bulk import: the whole table, ~6 s a search at 100,000).
            stale = [
                pk
                for pk, updated_at in window.values_list("id", "updated_at").iterator(chunk_size=5000)
                if self._seen.get(pk) != updated_at
            ]
            for start in range(0, len(stale), SYNC_FETCH_CHUNK):
                chunk = stale[start : start + SYNC_FETCH_CHUNK]
                for row in Memory.objects.filter(pk__in=chunk).order_by("updated_at", "id").values(*_SYNC_FIELDS):
                    self._apply(row)
            now = time.monotonic()
            if recount or now - self._recounted_at >= settings.MEMORY_INDEX_RECOUNT_SECONDS:
                self._recounted_at = now
                totals = self._live().aggregate(n=Count("id"), s=Sum("id"))
                if (totals["n"], int(totals["s"] or 0)) != (len(self.store), self._id_sum):
                    self._rebuild()

    def discard(self, memory_ids: Iterable[int]) -> None:
        """Forget memories the database no longer has (deleted outright)."""
        with self._lock:
            for memory_id in memory_ids:
                if memory_id in self.store:
                    self.store.remove(memory_id)
                    self._id_sum -= memory_id
                self._seen.pop(memory_id, None)

    def search(self, query_vec: np.ndarray, k: int, candidate_filter: CandidateFilter) -> list[VectorHit]:
        with self._lock:
            self.sync()
            return self.store.search(query_vec, k, candidate_filter)


_index: SemanticIndex | None = None
_index_lock = threading.Lock()


def semantic_index() -> SemanticIndex:
    global _index
    if _index is None:
        with _index_lock:
            if _index is None:
                _index = SemanticIndex()
    return _index
