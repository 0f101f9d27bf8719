"""Which memories a search admits, their confidence now and their similarity to a
query, in SQL (memory.vector_store and memory.owner_vectors search with them).

``CandidateFilter`` says which rows are admitted; ``candidates`` is their queryset with
each row's confidence (memory.decay, computed from the row's own clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.db.models import DateTimeField, Expression, F, FloatField, Q, QuerySet, Value
from django.db.models.sql.compiler import SQLCompiler

from memory.embeddings import EMBEDDING_MODEL
from memory.models.fields import vector_text
from memory.models.semantic import DecayPolicy, Memory

# CandidateFilter.project_id for "memories of no project".
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
    # Leaves out the memories this run wrote (Memory.source_run_id).
    not_from_run: int | None = None
    # Memories about their cited files only (True), or for the whole project (False).
    path_scoped: bool | None = None
    # Only these memories (recall's memories about a task's files: memory_ids_citing).
    ids_in: tuple[int, ...] | None = None

    def as_q(self) -> Q:
        """The filter as a condition on live memories of the current embedding model; a
        stale one (its code is gone) is not live."""
        q = Q(is_deleted=False, stale_at__isnull=True, embedding_model=EMBEDDING_MODEL)
        if self.owner_id is not None:
            q &= Q(owner_id=self.owner_id)
        if self.project_id is not None:
            q &= Q(project__isnull=True) if self.project_id == NO_PROJECT else Q(project_id=self.project_id)
        if self.is_global is not None:
            q &= Q(is_global=self.is_global)
        if self.project_or_global is not None:
            q &= Q(project_id=self.project_or_global) | Q(is_global=True)
        if self.agent_in is not None:
            q &= Q(agent__in=self.agent_in)
        if self.not_from_run is not None:
            # Django keeps the rows no run wrote (NULL): NOT (id = x AND id IS NOT NULL).
            q &= ~Q(source_run_id=self.not_from_run)
        if self.path_scoped is not None:
            q &= Q(path_scoped=self.path_scoped)
        if self.ids_in is not None:
            q &= Q(pk__in=self.ids_in)
        for field, value in (
            ("agent", self.agent),
            ("personality", self.personality),
            ("memory_type", self.memory_type),
        ):
            if value is not None:
                q &= Q(**{field: value})
        return q


@dataclass(frozen=True)
class VectorHit:
    memory_id: int
    similarity: float
    confidence: float
    score: float


class _ExpressionOfOperands(Expression):
    """An expression over ``operands`` (columns and values Django resolves and compiles)."""

    operands: list[Any]

    def get_source_expressions(self) -> list[Any]:
        return self.operands

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        self.operands = list(exprs)

    def as_sql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        raise NotImplementedError(f"Memory search does not support {connection.vendor} in SQL.")


class MemoryConfidence(_ExpressionOfOperands):
    """memory.decay.compute_confidence in SQL, at ``now``: 1 for a permanent memory,
    else 1 − age / half-life clamped to [0, 1], the age counted from created_at
    (contextual) or last_reinforced_at (reinforceable); a clock in the future is age 0."""

    output_field = FloatField()

    def __init__(self, now: datetime) -> None:
        super().__init__()
        self.operands = [
            Value(now, output_field=DateTimeField()),
            F("decay_policy"),
            F("half_life_hours"),
            F("created_at"),
            F("last_reinforced_at"),
        ]

    def _sql(self, compiler: SQLCompiler, age_hours: str, greatest: str) -> tuple[str, list[Any]]:
        now_sql, now_params = compiler.compile(self.operands[0])
        columns = [compiler.compile(column) for column in self.operands[1:]]
        if any(params for _, params in columns):
            raise ValueError("Column references take no parameters.")
        policy, half_life, created, reinforced = (sql for sql, _ in columns)
        clock = f"CASE WHEN {policy} = '{DecayPolicy.CONTEXTUAL}' THEN {created} ELSE {reinforced} END"
        age = age_hours.format(now=now_sql, clock=clock)
        sql = (
            f"CASE WHEN {policy} = '{DecayPolicy.PERMANENT}' THEN 1.0 "
            f"WHEN {half_life} <= 0 THEN 0.0 "
            f"ELSE {greatest}(0.0, 1.0 - {greatest}(0.0, {age}) / {half_life}) END"
        )
        return sql, list(now_params)

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        # date_part is float8; EXTRACT is numeric (PostgreSQL 14+), whose arithmetic
        # doubled the cost of a heavy user's search (bench_memory_search.py).
        return self._sql(compiler, "date_part('epoch', {now} - {clock}) / 3600.0", "GREATEST")

    def as_sqlite(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        # julianday is exact to the millisecond: ample against half-lives of hours.
        return self._sql(compiler, "(julianday({now}) - julianday({clock})) * 24.0", "MAX")


class VectorSimilarity(_ExpressionOfOperands):
    """pgvector: the inner product of the embedding with ``query`` (unit vectors: their
    cosine similarity). ``<#>`` is the negative inner product."""

    output_field = FloatField()

    def __init__(self, query: np.ndarray) -> None:
        super().__init__()
        self.operands = [F("embedding"), Value(vector_text(query))]

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        column, column_params = compiler.compile(self.operands[0])
        query, query_params = compiler.compile(self.operands[1])
        return f"(-({column} <#> ({query})::vector))", [*column_params, *query_params]


def candidates(candidate_filter: CandidateFilter) -> QuerySet[Any]:
    """The admitted memories with their ``confidence`` now, under the floor left out."""
    now = datetime.fromtimestamp(candidate_filter.now_ts, tz=UTC)
    admitted = Memory.objects.order_by().filter(candidate_filter.as_q()).annotate(confidence=MemoryConfidence(now))
    if candidate_filter.min_confidence <= 0:
        return admitted  # confidence is never below 0: no condition to evaluate per row
    return admitted.filter(confidence__gte=candidate_filter.min_confidence)


def rank_exactly(ids: np.ndarray, similarity: np.ndarray, confidence: np.ndarray, k: int) -> list[VectorHit]:
    """The k best of these rows by similarity × confidence, then similarity, then the
    newer id."""
    score = similarity * confidence
    n = len(ids)
    if k < n:
        # Everything scoring at least the k-th best (ties included), ranked exactly below.
        threshold = np.partition(score, n - k)[n - k]
        top = np.flatnonzero(score >= threshold)
    else:
        top = np.arange(n)
    order = top[np.lexsort((-ids[top], -similarity[top], -score[top]))][:k]
    return [
        VectorHit(
            memory_id=int(ids[i]),
            similarity=float(similarity[i]),
            confidence=float(confidence[i]),
            score=float(score[i]),
        )
        for i in order
    ]
