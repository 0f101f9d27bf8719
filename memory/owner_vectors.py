"""A heavy owner's memory vectors in RAM, and the exact search that reads them.

The exact scan of an owner's rows reads every vector from the table: 100,000 memories
are 150 MB of rows, over 100 ms on PostgreSQL and more on SQLite (bench_memory_search.py).
For an owner with at least MEMORY_VECTORS_IN_RAM_MIN memories a process keeps their ids
and vectors as one float32 matrix instead, and a search

1. ranks every vector by similarity to the query in numpy (a few ms);
2. asks the database which of the C most similar the filter admits, and their
   confidence now (filters and decay stay the database's: the rows are the truth);
3. stops when the k-th best similarity × confidence found beats every row outside
   those C (a confidence is at most 1, so none of them can score more than its
   similarity); else C grows fourfold, up to the owner's every row.

The answer is the exact ranking (vector_search's), not an approximation: what is cut
is the rows read, not the rows considered.

The matrix is valid while the owner's MemoryVectorsVersion is the one it was read at.
Every write of a vector moves it and stamps the rows written with the new version
(Memory.vectors_version), in one transaction: on PostgreSQL the version row stays locked
until commit, so versions commit in order and whoever sees version v sees every row
stamped v or below. When the version moved, the next search reads only the rows stamped
above the copy's version and makes a new copy with them (rows it held replaced, new ones
merged in id order); more than a quarter of the owner's rows changed, or a version gone
back (a write rolled back after a search in its transaction), and it reads them all
again. A soft delete or a change of clock, scope or staleness moves nothing, since the
database answers step 2. Each process keeps at most MEMORY_VECTORS_IN_RAM_MB of
matrices, least recently searched dropped first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
from django.conf import settings
from django.db import connection, transaction

from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL
from memory.models.fields import FLOAT32_LE
from memory.models.semantic import Memory, MemoryVectorsVersion
from memory.vector_query import CandidateFilter, VectorHit, candidates, rank_exactly

# Candidates asked of the database first: k × this, at least FIRST_CANDIDATES_MIN.
FIRST_CANDIDATES_PER_HIT = 40
FIRST_CANDIDATES_MIN = 500
# Ids per `IN (…)`: under SQLite's limit on a statement's parameters.
IDS_PER_QUERY = 5_000
# More rows changed since a copy's version than this share of the owner's, and reading
# them all again is about as cheap as reading those and merging them in.
FULL_READ_SHARE = 0.25
# Owners remembered as small (no matrix, a few bytes each) ...
SMALL_OWNERS_KEPT = 10_000
# ... and searched in the database without a look at their version for this long: a
# search in the database is exact whatever the count, so an owner who grew past the
# threshold is only searched the slower way for a while.
SMALL_OWNERS_RECOUNT_SECONDS = 60.0


@dataclass(frozen=True)
class OwnerVectors:
    """An owner's live memories at ``version``: how many, and (once read) their ids and
    vectors, rows in id order."""

    version: int
    count: int
    ids: np.ndarray
    matrix: np.ndarray | None
    counted_at: float = 0.0  # time.monotonic()

    @property
    def nbytes(self) -> int:
        return 0 if self.matrix is None else self.matrix.nbytes + self.ids.nbytes


_lock = threading.Lock()
_kept: OrderedDict[int, OwnerVectors] = OrderedDict()
_EMPTY_IDS = np.empty(0, dtype=np.int64)


def owner_vectors_changed(owner_id: int, memory_ids: Iterable[int]) -> None:
    """The vectors of ``memory_ids`` (the owner's) were written: a memory created,
    consolidated, rewritten. Moves the owner's version and stamps those rows with it, so
    that every process's copy reads them at its next search. Call it in the writer's
    transaction, after the rows are written."""
    table = MemoryVectorsVersion._meta.db_table
    ids = sorted(set(memory_ids))
    # A savepoint inside the writer's transaction: the version and its stamps go together.
    with transaction.atomic(), connection.cursor() as cursor:
        # The upsert locks the version row until commit (PostgreSQL): versions commit in
        # the order they are taken, so a reader that sees v sees every row stamped ≤ v.
        cursor.execute(
            f"INSERT INTO {table} (owner_id, version) VALUES (%s, 1) "  # noqa: S608 (our table's name)
            f"ON CONFLICT (owner_id) DO UPDATE SET version = {table}.version + 1 RETURNING version",
            [owner_id],
        )
        (version,) = cursor.fetchone()
        for start in range(0, len(ids), IDS_PER_QUERY):
            Memory.objects.filter(owner_id=owner_id, pk__in=ids[start : start + IDS_PER_QUERY]).update(
                vectors_version=version
            )
    with _lock:
        # A small owner is looked at again at once (a count, no vectors); a copy in RAM
        # stays, to be brought up to date by the next search (or left as it is, should
        # this transaction roll back).
        kept = _kept.get(owner_id)
        if kept is not None and kept.matrix is None:
            del _kept[owner_id]


def owner_vectors_forget() -> None:
    """Drop every owner's copy in this process (tests, benchmarks)."""
    with _lock:
        _kept.clear()


def _budget() -> int:
    return settings.MEMORY_VECTORS_IN_RAM_MB * 1024 * 1024


def owner_vectors(owner_id: int) -> OwnerVectors | None:
    """The owner's vectors as of now (this process's copy while still valid, brought up
    to date when a vector of theirs was written since, else read), or None when the
    owner is searched in the database: fewer memories than MEMORY_VECTORS_IN_RAM_MIN, or
    more than the budget holds. One query by primary key when the copy is valid; how many
    memories an owner has is counted once a version, and a small owner's version looked
    at once in SMALL_OWNERS_RECOUNT_SECONDS."""
    with _lock:
        kept = _kept.get(owner_id)
    if (
        kept is not None
        and not _in_ram(kept.count)
        and time.monotonic() - kept.counted_at < SMALL_OWNERS_RECOUNT_SECONDS
    ):
        return None
    version = MemoryVectorsVersion.objects.filter(owner_id=owner_id).values_list("version", flat=True).first() or 0
    if kept is None or kept.version != version:
        # Live rows of any model: the index on (owner, is_deleted) answers alone.
        count = Memory.objects.filter(owner_id=owner_id, is_deleted=False).count()
        fresh = OwnerVectors(version=version, count=count, ids=_EMPTY_IDS, matrix=None, counted_at=time.monotonic())
        # A version gone back (a write rolled back after a search inside its own
        # transaction read it) leaves nothing to build on: read in full.
        if kept is not None and kept.matrix is not None and kept.version < version and _in_ram(count):
            fresh = _brought_up_to_date(owner_id, kept, fresh)
        kept = fresh
    elif kept.matrix is None:
        kept = replace(kept, counted_at=time.monotonic())
    in_ram = _in_ram(kept.count)
    if in_ram and kept.matrix is None:
        ids, matrix = _read_vectors(owner_id)
        kept = replace(kept, ids=ids, matrix=matrix)
    _keep(owner_id, kept)
    return kept if in_ram else None


def _brought_up_to_date(owner_id: int, kept: OwnerVectors, fresh: OwnerVectors) -> OwnerVectors:
    """``fresh`` (counted, no vectors yet) with ``kept``'s vectors and those written
    since ``kept.version`` in place of theirs; ``fresh`` as it is (to be read in full)
    when more than FULL_READ_SHARE of the owner's rows changed. ``kept``'s arrays are
    never written to: another thread may be searching them."""
    assert kept.matrix is not None
    most = int(fresh.count * FULL_READ_SHARE)
    changed_ids, changed = _read_vectors(owner_id, since_version=kept.version, limit=most + 1)
    if len(changed_ids) > most:
        return fresh
    # Where each changed row is in the copy, or would go (ids stay sorted: searchsorted).
    at = np.searchsorted(kept.ids, changed_ids)
    held = at < len(kept.ids)
    held[held] = kept.ids[at[held]] == changed_ids[held]
    # np.insert copies even when there is nothing to insert: the new arrays are ours.
    ids = np.insert(kept.ids, at[~held], changed_ids[~held])
    matrix = np.insert(kept.matrix, at[~held], changed[~held], axis=0)
    matrix[np.searchsorted(ids, changed_ids[held])] = changed[held]
    return replace(fresh, ids=ids, matrix=matrix)


def _in_ram(count: int) -> bool:
    return count >= settings.MEMORY_VECTORS_IN_RAM_MIN and count * (DIMENSIONS * 4 + 8) <= _budget()


def _keep(owner_id: int, kept: OwnerVectors) -> None:
    """Keep ``kept``: the most recently searched owners' copies within the budget, and
    what is known of the small owners (their count), up to SMALL_OWNERS_KEPT of them."""
    with _lock:
        _kept[owner_id] = kept
        _kept.move_to_end(owner_id)
        small = [owner for owner, known in _kept.items() if known.matrix is None]
        for owner in small[: max(0, len(small) - SMALL_OWNERS_KEPT)]:
            del _kept[owner]
        while sum(known.nbytes for known in _kept.values()) > _budget():
            oldest = next(owner for owner, known in _kept.items() if known.matrix is not None)
            del _kept[oldest]


def _read_vectors(
    owner_id: int, *, since_version: int | None = None, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The owner's live vectors straight from the cursor (no field conversion per row),
    in id order; on PostgreSQL in pgvector's binary form (2-byte dimension, 2 unused,
    big-endian float32s) rather than its text.

    ``since_version``: only the rows whose vector was written above that version (at
    most ``limit``), deleted or not: a copy holds deleted rows anyway (a delete writes no
    vector), and the database leaves them out at search time."""
    sql = f"SELECT id, embedding FROM {Memory._meta.db_table} WHERE owner_id = %s AND "  # noqa: S608 (our table's name)
    params: list[int | str] = [owner_id]
    if since_version is None:
        sql += "NOT is_deleted"
    else:
        sql += "vectors_version > %s"
        params.append(since_version)
    sql += " AND embedding_model = %s ORDER BY id"
    params.append(EMBEDDING_MODEL)
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    if connection.vendor == "postgresql":
        import psycopg

        connection.ensure_connection()
        # Django's cursors bind on the client, which cannot ask for binary results.
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(sql, params, binary=True)
            rows = cursor.fetchall()
        row_type = np.dtype([("header", "V4"), ("vector", ">f4", (DIMENSIONS,))])
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        row_type = np.dtype([("vector", FLOAT32_LE, (DIMENSIONS,))])
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    joined = b"".join(bytes(row[1]) for row in rows)
    del rows  # 100,000 vectors are 150 MB: no more copies alive at once than needed
    # One copy, to native float32 (a view of the joined bytes would be read-only anyway).
    return ids, np.frombuffer(joined, dtype=row_type)["vector"].astype(np.float32)


def search_owner_vectors(
    vectors: OwnerVectors, query: np.ndarray, k: int, candidate_filter: CandidateFilter
) -> list[VectorHit]:
    """The k best memories the filter admits, by similarity × confidence, then
    similarity, then the newer id: the same as vector_search's exact query."""
    if vectors.matrix is None:
        raise ValueError("The owner's vectors are not in RAM.")
    similarity = (vectors.matrix @ query).astype(np.float64)
    n = len(similarity)
    asked = np.zeros(n, dtype=bool)
    found_ids: list[np.ndarray] = []
    found_confidence: list[np.ndarray] = []
    size = min(n, max(FIRST_CANDIDATES_MIN, k * FIRST_CANDIDATES_PER_HIT))
    while True:
        top = np.argpartition(-similarity, size - 1)[:size] if size < n else np.arange(n)
        new = top[~asked[top]]
        asked[new] = True
        for ids, confidence in _admitted(vectors.ids[new], candidate_filter):
            found_ids.append(ids)
            found_confidence.append(confidence)
        ids = np.concatenate(found_ids) if found_ids else _EMPTY_IDS
        confidence = np.concatenate(found_confidence) if found_confidence else np.empty(0)
        rows = np.searchsorted(vectors.ids, ids)
        hits = rank_exactly(ids, similarity[rows], confidence, k)
        if size == n:
            return hits
        # No row outside the candidates scores more than its similarity (or 0).
        outside_best = max(0.0, float(similarity[~asked].max()))
        if len(hits) == k and hits[-1].score > outside_best:
            return hits
        size = min(n, size * 4)


def _admitted(ids: np.ndarray, candidate_filter: CandidateFilter) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Of ``ids``, those the filter admits now, with their confidence now."""
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = ids[start : start + IDS_PER_QUERY].tolist()
        rows = list(candidates(candidate_filter).filter(pk__in=chunk).values_list("id", "confidence"))
        if rows:
            yield (
                np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows)),
                np.fromiter((row[1] for row in rows), dtype=np.float64, count=len(rows)),
            )
