"""Semantic search in the database: the rows at the moment of the query are the truth.

A search is one query over the memories its filter admits (an owner's, with a btree on
(owner, is_deleted)); memory.vector_query says which rows those are and computes each
one's confidence in SQL, so a memory reinforced, deleted or added by any process a
moment ago is ranked as it is now:

* PostgreSQL: pgvector computes the similarity (``<#>``, the negative inner product of
  unit vectors) and the query ranks and cuts, exactly: similarity × confidence, then
  similarity, then the newer id. No approximate index: with a filter and a confidence
  factor, HNSW's candidates are not the exact top (measured, bench/README.md);
* SQLite: the query returns the admitted rows' vectors and confidences, and numpy ranks
  them the same way;
* a heavy owner's (MEMORY_VECTORS_IN_RAM_MIN memories or more): the vectors come from
  this process's copy (memory.owner_vectors) and the database is asked only about the
  most similar rows, until no other row can rank higher: the same exact answer.

``vector_search`` returns the best k.
"""

from __future__ import annotations

import numpy as np
from django.db import connection

from memory.models.fields import FLOAT32_LE
from memory.owner_vectors import owner_vectors, search_owner_vectors
from memory.vector_query import CandidateFilter, VectorHit, VectorSimilarity, candidates, rank_exactly


def vector_search(query_vec: np.ndarray, k: int, candidate_filter: CandidateFilter) -> list[VectorHit]:
    """The k best memories the filter admits, by similarity × confidence, then
    similarity, then the newer id."""
    if k <= 0 or candidate_filter.agent_in == ():
        return []
    query = np.asarray(query_vec, dtype=np.float32).reshape(-1)
    # A heavy owner's vectors are read from RAM, the rows' filters and clocks still from
    # the database (memory.owner_vectors); a search by ids reads few rows anyway.
    if candidate_filter.owner_id is not None and candidate_filter.ids_in is None:
        vectors = owner_vectors(candidate_filter.owner_id)
        if vectors is not None:
            return search_owner_vectors(vectors, query, k, candidate_filter)
    if connection.vendor == "postgresql":
        return _search_postgresql(query, k, candidate_filter)
    return _search_numpy(query, k, candidate_filter)


def _search_postgresql(query: np.ndarray, k: int, candidate_filter: CandidateFilter) -> list[VectorHit]:
    inner = candidates(candidate_filter).annotate(similarity=VectorSimilarity(query))
    sql, params = inner.values("id", "similarity", "confidence").query.sql_with_params()
    # The subquery computes each row's similarity once; the ranking reads it (ordering
    # the queryset by an annotation would compute the inner product twice a row). Its
    # SQL is Django's, its values stay parameters.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, similarity, confidence FROM ({sql}) AS candidate "  # noqa: S608
            "ORDER BY similarity * confidence DESC, similarity DESC, id DESC LIMIT %s",
            [*params, k],
        )
        rows = cursor.fetchall()
    return [
        VectorHit(memory_id=pk, similarity=float(sim), confidence=float(conf), score=float(sim) * float(conf))
        for pk, sim, conf in rows
    ]


def _search_numpy(query: np.ndarray, k: int, candidate_filter: CandidateFilter) -> list[VectorHit]:
    sql, params = candidates(candidate_filter).values_list("id", "embedding", "confidence").query.sql_with_params()
    # Straight from the cursor: the field's conversion of each blob to an array cost
    # more than the search (bench_memory_search.py: 10,000 rows, 82 ms against 37 ms).
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return []
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype=FLOAT32_LE).reshape(len(rows), -1)
    confidence = np.fromiter((row[2] for row in rows), dtype=np.float64, count=len(rows))
    return rank_exactly(ids, (matrix @ query).astype(np.float64), confidence, k)
