"""Search in the database against a brute force over the same rows: the same memories,
the same order, for every filter, soft delete and decay clock. The suite runs on SQLite
(numpy ranking) and on PostgreSQL (pgvector ranking in SQL): both must agree with it.
Every test runs twice: an owner searched in the database, and searched from the copy of
their vectors in RAM (memory.owner_vectors), asked about a few candidates at a time so
that the search must widen."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pytest
from django.utils import timezone

from accounts.models import User
from memory import owner_vectors
from memory.decay import compute_confidence
from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL
from memory.models.semantic import DecayPolicy, Memory
from memory.vector_query import NO_PROJECT, CandidateFilter, VectorHit
from memory.vector_store import vector_search
from projects.models import Project
from tests.factories import ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

# Scores this close are a tie that float rounding may order either way (pgvector sums
# in float32 order of its own; SQLite's julianday is exact to the millisecond).
TIE = 1e-6


@pytest.fixture(autouse=True, params=["in the database", "from RAM"])
def search_path(request: pytest.FixtureRequest, settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    owner_vectors.owner_vectors_forget()
    if request.param == "from RAM":
        settings.MEMORY_VECTORS_IN_RAM_MIN = 1
        monkeypatch.setattr(owner_vectors, "FIRST_CANDIDATES_MIN", 3)
        monkeypatch.setattr(owner_vectors, "FIRST_CANDIDATES_PER_HIT", 1)
    yield request.param
    owner_vectors.owner_vectors_forget()


@dataclass(frozen=True)
class Expected:
    memory_id: int
    similarity: float
    confidence: float

    @property
    def score(self) -> float:
        return self.similarity * self.confidence


def unit(rng: np.random.Generator) -> np.ndarray:
    vector = rng.standard_normal(DIMENSIONS).astype(np.float32)
    return vector / np.linalg.norm(vector)


def brute_force(
    candidate_filter: CandidateFilter, query: np.ndarray, k: int, now: datetime, rows: list[Memory] | None = None
) -> list[Expected]:
    """The ranking worked out in Python from every row (``rows``, read now if not
    given), filter by filter."""
    f = candidate_filter
    expected = []
    for m in Memory.objects.all() if rows is None else rows:
        admitted = (
            not m.is_deleted
            and m.embedding_model == EMBEDDING_MODEL
            and (f.owner_id is None or m.owner_id == f.owner_id)
            and (f.agent is None or m.agent == f.agent)
            and (f.personality is None or m.personality == f.personality)
            and (f.memory_type is None or m.memory_type == f.memory_type)
            and (f.is_global is None or m.is_global == f.is_global)
            and (
                f.project_id is None
                or (m.project_id is None if f.project_id == NO_PROJECT else m.project_id == f.project_id)
            )
            and (f.project_or_global is None or m.project_id == f.project_or_global or m.is_global)
            and (f.agent_in is None or m.agent in f.agent_in)
            and (f.not_from_run is None or m.source_run_id != f.not_from_run)
        )
        if not admitted:
            continue
        confidence = compute_confidence(m.decay_policy, m.created_at, m.last_reinforced_at, m.half_life_hours, now)
        if confidence < f.min_confidence:
            continue
        similarity = float(np.dot(m.embedding.astype(np.float64), query.astype(np.float64)))
        expected.append(Expected(m.pk, similarity, confidence))
    expected.sort(key=lambda e: (-e.score, -e.similarity, -e.memory_id))
    return expected[:k]


def assert_same_ranking(got: list[VectorHit], expected: list[Expected], *, where: str = "") -> None:
    assert len(got) == len(expected), where
    for position, (hit, exp) in enumerate(zip(got, expected, strict=True)):
        assert hit.score == pytest.approx(exp.score, abs=TIE), (where, position)
        assert hit.similarity == pytest.approx(exp.similarity, abs=TIE), (where, position)
        assert hit.confidence == pytest.approx(exp.confidence, abs=TIE), (where, position)
        assert hit.score == pytest.approx(hit.similarity * hit.confidence, abs=1e-12)
    # Ids in the same order, except within a run of near-equal scores.
    groups = itertools.groupby(range(len(expected)), key=lambda i: round(expected[i].score / (10 * TIE)))
    for _, positions in groups:
        span = list(positions)
        assert {got[i].memory_id for i in span} == {expected[i].memory_id for i in span}, (where, span)


@pytest.fixture
def world() -> dict[str, object]:
    """Three users; two projects of the first; ~400 memories across every scope, policy
    and clock, some deleted, some of another model, some with identical vectors."""
    rng = np.random.default_rng(20261124)
    pick = random.Random(20261124)
    users = [UserFactory() for _ in range(3)]
    projects = [ProjectFactory(owner=users[0]) for _ in range(2)]
    now = timezone.now()
    rows = []
    shared_vector = unit(rng)
    for i in range(400):
        owner = users[0] if i % 5 else pick.choice(users[1:])
        policy = pick.choice([DecayPolicy.PERMANENT, DecayPolicy.CONTEXTUAL, DecayPolicy.REINFORCEABLE])
        created = now - timedelta(hours=pick.uniform(0, 300))
        # Some clocks in the future (skew between processes), some past their half-life.
        reinforced = created + timedelta(hours=pick.uniform(0, 320))
        duplicate = i % 37 == 0
        rows.append(
            Memory(
                owner=owner,
                content=f"memory {i}",
                content_hash=f"{i:064d}",
                memory_type=pick.choice(["note", "preference"]),
                decay_policy=DecayPolicy.PERMANENT if duplicate else policy,
                half_life_hours=pick.choice([0.0, 24.0, 168.0, 1000.0]),
                agent=pick.choice(["", "", "coder", "reviewer"]),
                personality=pick.choice(["", "terse"]),
                project=pick.choice([None, *projects]) if owner == users[0] else None,
                is_global=pick.random() < 0.15,
                created_at=created,
                last_reinforced_at=reinforced,
                is_deleted=pick.random() < 0.1,
                # Identical vectors: exact ties, broken by the newer id.
                embedding=shared_vector if duplicate else unit(rng),
                embedding_model=EMBEDDING_MODEL if pick.random() > 0.05 else "another-model",
                # Written by run 1, run 2 or by no run.
                source_run_id=(None, 1, 2)[i % 3],
            )
        )
    Memory.objects.bulk_create(rows)
    return {"users": users, "projects": projects, "now": now, "rng": rng, "shared": shared_vector}


def filters_for(user: User, projects: list[Project], now_ts: float) -> list[CandidateFilter]:
    base = {"now_ts": now_ts, "owner_id": user.pk}
    return [
        CandidateFilter(**base),
        CandidateFilter(now_ts=now_ts),  # no owner: every user's (never asked by the product)
        CandidateFilter(**base, agent="coder"),
        CandidateFilter(**base, personality="terse", memory_type="preference"),
        CandidateFilter(**base, project_id=projects[0].pk),
        CandidateFilter(**base, project_id=NO_PROJECT),
        CandidateFilter(**base, is_global=True),
        CandidateFilter(**base, is_global=False, agent=""),
        CandidateFilter(**base, project_or_global=projects[1].pk, agent_in=("", "reviewer")),
        CandidateFilter(**base, min_confidence=0.5),
        CandidateFilter(**base, min_confidence=1e-300),
        CandidateFilter(**base, agent_in=("nobody",)),
        CandidateFilter(**base, not_from_run=1),
        CandidateFilter(**base, project_or_global=projects[0].pk, agent_in=("", "coder"), not_from_run=2),
    ]


def test_search_equals_brute_force_under_every_filter(world: dict) -> None:
    users, projects, now, rng = world["users"], world["projects"], world["now"], world["rng"]
    queries = [unit(rng) for _ in range(4)] + [world["shared"]]
    rows = list(Memory.objects.all())
    for f in filters_for(users[0], projects, now.timestamp()):
        for q, query in enumerate(queries):
            for k in (1, 10, 500):
                expected = brute_force(f, query, k, now, rows)
                assert_same_ranking(vector_search(query, k, f), expected, where=f"{f} query {q} k {k}")
    # The checks above had something to check.
    assert len(brute_force(CandidateFilter(now_ts=now.timestamp(), owner_id=users[0].pk), queries[0], 500, now)) > 200


def test_exact_ties_go_to_the_newer_memory(world: dict) -> None:
    users, now = world["users"], world["now"]
    f = CandidateFilter(now_ts=now.timestamp(), owner_id=users[0].pk)
    hits = vector_search(world["shared"], 5, f)
    twins = [h.memory_id for h in hits if h.similarity > 0.999]
    assert len(twins) >= 2
    assert twins == sorted(twins, reverse=True)


def test_another_users_memories_are_never_returned(world: dict) -> None:
    users, now = world["users"], world["now"]
    # The other user's memory is the query itself: similarity 1, the best possible.
    theirs = Memory.objects.filter(owner=users[1], is_deleted=False, embedding_model=EMBEDDING_MODEL).first()
    assert theirs is not None
    hits = vector_search(theirs.embedding, 500, CandidateFilter(now_ts=now.timestamp(), owner_id=users[0].pk))
    owners = set(Memory.objects.filter(pk__in=[h.memory_id for h in hits]).values_list("owner_id", flat=True))
    assert hits and owners == {users[0].pk}


def test_soft_delete_and_reinforcement_count_at_the_next_query(world: dict) -> None:
    users, now = world["users"], world["now"]
    f = CandidateFilter(now_ts=now.timestamp(), owner_id=users[0].pk, min_confidence=0.9)
    faded = (
        Memory.objects.filter(
            owner=users[0], is_deleted=False, embedding_model=EMBEDDING_MODEL, decay_policy=DecayPolicy.REINFORCEABLE
        )
        .exclude(half_life_hours=0)
        .filter(last_reinforced_at__lt=now - timedelta(hours=200))
        .first()
    )
    assert faded is not None
    query = faded.embedding
    assert faded.pk not in [h.memory_id for h in vector_search(query, 5, f)]
    Memory.objects.filter(pk=faded.pk).update(last_reinforced_at=now)
    top = vector_search(query, 1, f)[0]
    assert (top.memory_id, top.confidence) == (faded.pk, pytest.approx(1.0))
    Memory.objects.filter(pk=faded.pk).update(is_deleted=True)
    assert faded.pk not in [h.memory_id for h in vector_search(query, 5, f)]


def test_confidence_follows_the_decay_clock(world: dict) -> None:
    users, now = world["users"], world["now"]
    user = users[2]
    query = world["rng"].standard_normal(DIMENSIONS).astype(np.float32)
    query /= np.linalg.norm(query)

    def one(policy: str, created_hours_ago: float, reinforced_hours_ago: float, half_life: float) -> float:
        Memory.objects.filter(owner=user).delete()
        memory = Memory.objects.create(
            owner=user,
            content="clock",
            content_hash="c" * 64,
            decay_policy=policy,
            half_life_hours=half_life,
            created_at=now - timedelta(hours=created_hours_ago),
            last_reinforced_at=now - timedelta(hours=reinforced_hours_ago),
            embedding=query,
            embedding_model=EMBEDDING_MODEL,
        )
        # A vector written outside memory.services: the processes' copies are told here.
        owner_vectors.owner_vectors_changed(user.pk, [memory.pk])
        (hit,) = vector_search(query, 1, CandidateFilter(now_ts=now.timestamp(), owner_id=user.pk))
        assert hit.similarity == pytest.approx(1.0, abs=1e-5)
        return hit.confidence

    assert one(DecayPolicy.PERMANENT, 1000, 1000, 10) == 1.0
    assert one(DecayPolicy.CONTEXTUAL, 3, 0, 10) == pytest.approx(0.7, abs=TIE)  # from creation
    assert one(DecayPolicy.REINFORCEABLE, 30, 2.5, 10) == pytest.approx(0.75, abs=TIE)  # from reinforcement
    assert one(DecayPolicy.REINFORCEABLE, 30, 12, 10) == 0.0  # faded: clamped, not negative
    assert one(DecayPolicy.CONTEXTUAL, -5, 0, 10) == 1.0  # a clock in the future: age 0
    assert one(DecayPolicy.CONTEXTUAL, 0, 0, 0) == 0.0  # no half-life: nothing left


def test_nothing_to_search() -> None:
    now_ts = timezone.now().timestamp()
    query = np.ones(DIMENSIONS, dtype=np.float32) / np.sqrt(DIMENSIONS)
    assert vector_search(query, 5, CandidateFilter(now_ts=now_ts, owner_id=10**9)) == []
    assert vector_search(query, 0, CandidateFilter(now_ts=now_ts)) == []
    assert vector_search(query, 5, CandidateFilter(now_ts=now_ts, agent_in=())) == []


def test_a_long_memory_keeps_its_vector_in_its_row(owner) -> None:
    """PostgreSQL: TOAST moves the text of a long row out of line, never the vector
    (memory/migrations/0009); SQLite keeps everything in the row anyway."""
    from django.db import connection

    from memory.citations import citation_of_quote
    from memory.embeddings import embed_text
    from memory.selectors.semantic import memory_search_vector
    from memory.services.semantic import memory_create

    quote = "\n".join(f"line {n} = {'x' * 60}" for n in range(30))
    citation = citation_of_quote(path="a.py", start=1, end=30, quote=quote, commit="c" * 40)
    memory = memory_create(owner=owner, content="y" * 3000, citations=[citation], path_scoped=True).memory
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memory_memory'::regclass "
                "AND attname = 'embedding'"
            )
            assert cursor.fetchone() == ("p",)
    (found,) = memory_search_vector(user=owner, query_vec=embed_text("y" * 3000), limit=1)
    assert found.memory.pk == memory.pk
