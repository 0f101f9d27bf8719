"""A heavy owner's vectors in RAM (memory.owner_vectors): kept while no vector of theirs
changes, brought up to date after a write of one by reading only the rows written,
never another owner's, and searched to the same answer as the database's exact query."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import User
from memory import owner_vectors
from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL, embed_text
from memory.models.semantic import Memory, MemoryVectorsVersion
from memory.selectors.semantic import memory_search
from memory.services.semantic import memory_create, memory_delete, memory_update_content
from memory.tests.test_vector_search import assert_same_ranking, brute_force
from memory.vector_query import CandidateFilter
from memory.vector_store import vector_search
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

FACTS = [
    "The production database is backed up every night at 2am.",
    "Deployments are frozen on Fridays.",
    "Our API rate limit is 100 requests per minute per token.",
    "The staging server runs on a single small machine.",
]


@pytest.fixture(autouse=True)
def in_ram(settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every owner with a memory is searched from RAM, a few candidates at a time."""
    owner_vectors.owner_vectors_forget()
    settings.MEMORY_VECTORS_IN_RAM_MIN = 1
    monkeypatch.setattr(owner_vectors, "FIRST_CANDIDATES_MIN", 2)
    monkeypatch.setattr(owner_vectors, "FIRST_CANDIDATES_PER_HIT", 1)
    yield
    owner_vectors.owner_vectors_forget()


def found(user: User, query: str, limit: int = 10) -> list[int]:
    return [result.memory.pk for result in memory_search(user=user, query=query, limit=limit)]


def test_the_copy_is_kept_until_a_vector_of_the_owner_is_written(owner: User) -> None:
    memory_create(owner=owner, content=FACTS[0])
    first = owner_vectors.owner_vectors(owner.pk)
    assert first is not None and first.matrix is not None and len(first.ids) == 1
    assert owner_vectors.owner_vectors(owner.pk) is first  # nothing written: the same copy
    memory_create(owner=owner, content=FACTS[1])
    second = owner_vectors.owner_vectors(owner.pk)
    assert second is not None and second is not first and len(second.ids) == 2 and second.version > first.version


def test_a_new_memory_is_found_at_the_next_search(owner: User) -> None:
    backup = memory_create(owner=owner, content=FACTS[0]).memory
    assert found(owner, "When is the data backed up?") == [backup.pk]  # the copy is made here
    freeze = memory_create(owner=owner, content=FACTS[1]).memory
    assert found(owner, "Can we ship on a Friday?", limit=1) == [freeze.pk]


def test_a_rewritten_memory_is_found_by_its_new_meaning(owner: User) -> None:
    memory = memory_create(owner=owner, content=FACTS[0]).memory
    memory_create(owner=owner, content=FACTS[2])
    query = "How many requests per minute may a client make?"
    assert found(owner, query, limit=1) != [memory.pk]
    memory_update_content(owner=owner, memory_id=memory.pk, content="Clients may make 500 requests a minute.")
    (hit,) = vector_search(
        embed_text("Clients may make 500 requests a minute."),
        1,
        CandidateFilter(now_ts=timezone.now().timestamp(), owner_id=owner.pk),
    )
    assert (hit.memory_id, hit.similarity) == (memory.pk, pytest.approx(1.0, abs=1e-5))


def test_a_deleted_memory_is_gone_at_the_next_search_though_the_copy_holds_it(owner: User) -> None:
    keep, gone = (memory_create(owner=owner, content=text).memory for text in FACTS[:2])
    kept = owner_vectors.owner_vectors(owner.pk)
    memory_delete(owner=owner, memory_id=gone.pk)
    assert (
        kept is not None and owner_vectors.owner_vectors(owner.pk) is kept and gone.pk in kept.ids
    )  # a delete writes no vector
    assert found(owner, "Can we ship on a Friday?") == [keep.pk]


def test_owners_never_see_each_others_memories(owner: User) -> None:
    other: User = UserFactory.create()
    mine = {memory_create(owner=owner, content=text).memory.pk for text in FACTS[:2]}
    theirs = {memory_create(owner=other, content=text).memory.pk for text in FACTS}
    # Both owners' copies are in RAM, and the other's holds the very text searched.
    assert set(found(other, FACTS[0])) == theirs
    assert set(found(owner, FACTS[0])) == mine
    copy = owner_vectors.owner_vectors(owner.pk)
    assert copy is not None and set(copy.ids.tolist()) == mine


def test_widening_finds_a_confident_memory_far_down_by_similarity(owner: User) -> None:
    """The most similar rows have faded: the answer lies beyond the first candidates,
    and only the bound on the rows not yet asked about says when to stop."""
    rng = np.random.default_rng(5)
    query = rng.standard_normal(DIMENSIONS).astype(np.float32)
    query /= np.linalg.norm(query)
    now = timezone.now()
    rows = []
    for i in range(60):
        # Similarity to the query falls with i; the first 50 have faded to nothing.
        noise = rng.standard_normal(DIMENSIONS).astype(np.float32)
        vector = query * (1 - i / 100) + noise / np.linalg.norm(noise) * (i / 100)
        long_ago = now - timedelta(hours=1000)
        rows.append(
            Memory(
                owner=owner,
                content=f"memory {i}",
                content_hash=f"{i:064d}",
                half_life_hours=10.0,
                created_at=long_ago if i < 50 else now,
                last_reinforced_at=long_ago if i < 50 else now,
                embedding=vector / np.linalg.norm(vector),
                embedding_model=EMBEDDING_MODEL,
            )
        )
    Memory.objects.bulk_create(rows)
    hits = vector_search(query, 3, CandidateFilter(now_ts=now.timestamp(), owner_id=owner.pk, min_confidence=0.5))
    confident = Memory.objects.filter(owner=owner).order_by("id")[50:]
    expected = sorted(confident, key=lambda m: -float(np.dot(m.embedding, query)))[:3]
    assert [hit.memory_id for hit in hits] == [m.pk for m in expected]
    assert all(hit.confidence == pytest.approx(1.0, abs=1e-3) for hit in hits)


def test_an_owner_over_the_budget_is_searched_in_the_database(owner: User, settings) -> None:
    settings.MEMORY_VECTORS_IN_RAM_MB = 0
    memory = memory_create(owner=owner, content=FACTS[0]).memory
    assert owner_vectors.owner_vectors(owner.pk) is None
    assert found(owner, "When is the data backed up?") == [memory.pk]


def test_a_small_owner_is_searched_in_the_database(owner: User, settings) -> None:
    settings.MEMORY_VECTORS_IN_RAM_MIN = 3
    memory = memory_create(owner=owner, content=FACTS[0]).memory
    assert owner_vectors.owner_vectors(owner.pk) is None
    assert found(owner, "When is the data backed up?") == [memory.pk]


def test_an_owner_grown_past_the_threshold_in_another_process_is_read_after_the_interval(
    owner: User, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MEMORY_VECTORS_IN_RAM_MIN = 2
    memory_create(owner=owner, content=FACTS[0])
    assert owner_vectors.owner_vectors(owner.pk) is None  # small: searched in the database
    # Another process writes a second memory: its version reaches the database only.
    other = memory_create(owner=UserFactory.create(), content=FACTS[1]).memory
    Memory.objects.filter(pk=other.pk).update(owner=owner)
    MemoryVectorsVersion.objects.filter(owner=owner).update(version=F("version") + 1)
    assert owner_vectors.owner_vectors(owner.pk) is None  # not looked at again yet
    monkeypatch.setattr(owner_vectors, "SMALL_OWNERS_RECOUNT_SECONDS", 0.0)
    copy = owner_vectors.owner_vectors(owner.pk)
    assert copy is not None and len(copy.ids) == 2


# Near-duplicates (memory/tests/test_semantic_consolidation.py): LONGER consolidates into
# SHORT and, being longer, brings its wording and embedding.
SHORT = "Run the tests with pytest before committing."
LONGER = "Always run the tests with pytest before you commit anything."
BACKGROUND_ROWS = 40


@dataclass(frozen=True)
class Read:
    since_version: int | None  # None: every row of the owner's
    ids: list[int]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Read]:
    """Every read of an owner's vectors from the database, and the rows it returned."""
    seen: list[Read] = []
    read_vectors = owner_vectors._read_vectors

    def recorded(owner_id: int, **kwargs: int | None) -> tuple[np.ndarray, np.ndarray]:
        ids, matrix = read_vectors(owner_id, **kwargs)
        seen.append(Read(kwargs.get("since_version"), ids.tolist()))
        return ids, matrix

    monkeypatch.setattr(owner_vectors, "_read_vectors", recorded)
    return seen


def background(owner: User, rows: int = BACKGROUND_ROWS) -> None:
    """``rows`` memories of random meaning and assorted clocks, written before versions
    were stamped (vectors_version 0, as rows older than the stamps are)."""
    rng = np.random.default_rng(2026)
    now = timezone.now()
    memories = []
    for i in range(rows):
        vector = rng.standard_normal(DIMENSIONS).astype(np.float32)
        clock = now - timedelta(hours=float(rng.uniform(0, 200)))
        memories.append(
            Memory(
                owner=owner,
                content=f"background {i}",
                content_hash=f"b{i:063d}",
                half_life_hours=float(rng.choice([24.0, 168.0])),
                created_at=clock,
                last_reinforced_at=clock,
                embedding=vector / np.linalg.norm(vector),
                embedding_model=EMBEDDING_MODEL,
            )
        )
    Memory.objects.bulk_create(memories)


def assert_searches_like_brute_force(owner: User, texts: list[str]) -> None:
    """From the copy in RAM (the fixture's few candidates at a time), the same ranking
    as the brute force over the owner's rows now, for each text and a random query."""
    now = timezone.now()
    random_query = np.random.default_rng(7).standard_normal(DIMENSIONS).astype(np.float32)
    for query in [*(embed_text(text) for text in texts), random_query / np.linalg.norm(random_query)]:
        for k in (1, 5, 100):
            f = CandidateFilter(now_ts=now.timestamp(), owner_id=owner.pk)
            assert_same_ranking(vector_search(query, k, f), brute_force(f, query, k, now), where=f"k {k}")


def version_of(owner: User) -> int:
    return MemoryVectorsVersion.objects.filter(owner=owner).values_list("version", flat=True).first() or 0


@pytest.mark.parametrize("write", ["created", "consolidated", "rewritten"])
def test_after_a_write_of_each_kind_only_the_row_written_is_read(owner: User, reads: list[Read], write: str) -> None:
    background(owner)
    short = memory_create(owner=owner, content=SHORT).memory
    before = owner_vectors.owner_vectors(owner.pk)
    assert before is not None and before.matrix is not None and len(before.ids) == BACKGROUND_ROWS + 1
    old_ids, old_matrix = before.ids.copy(), before.matrix.copy()
    reads.clear()

    if write == "created":
        written = memory_create(owner=owner, content=FACTS[1]).memory
        text = FACTS[1]
    elif write == "consolidated":
        result = memory_create(owner=owner, content=LONGER)
        assert result.consolidated and result.memory.pk == short.pk
        written, text = result.memory, LONGER
    else:
        written = memory_update_content(owner=owner, memory_id=short.pk, content=FACTS[2])
        text = FACTS[2]

    after = owner_vectors.owner_vectors(owner.pk)
    assert reads == [Read(since_version=before.version, ids=[written.pk])]  # no full read
    assert after is not None and after.matrix is not None and after.version == version_of(owner) > before.version
    assert after.ids.tolist() == sorted(Memory.objects.filter(owner=owner).values_list("id", flat=True))
    (row,) = np.flatnonzero(after.ids == written.pk)
    assert after.matrix[row] == pytest.approx(embed_text(text), abs=1e-6)
    # The old copy is as it was: a search in another thread may still be reading it.
    assert np.array_equal(before.ids, old_ids) and np.array_equal(before.matrix, old_matrix)
    assert_searches_like_brute_force(owner, [text, SHORT, FACTS[0]])
    assert reads == [Read(since_version=before.version, ids=[written.pk])]  # the searches read nothing more


def test_two_writes_before_a_search_are_both_read(owner: User, reads: list[Read]) -> None:
    background(owner)
    rewritten = memory_create(owner=owner, content=FACTS[0]).memory
    before = owner_vectors.owner_vectors(owner.pk)
    assert before is not None
    reads.clear()
    created = memory_create(owner=owner, content=FACTS[1]).memory  # version v + 1
    memory_update_content(owner=owner, memory_id=rewritten.pk, content=FACTS[3])  # version v + 2
    assert version_of(owner) == before.version + 2

    after = owner_vectors.owner_vectors(owner.pk)
    assert reads == [Read(since_version=before.version, ids=sorted([rewritten.pk, created.pk]))]
    assert after is not None and after.matrix is not None and after.version == before.version + 2
    for memory_id, text in ((created.pk, FACTS[1]), (rewritten.pk, FACTS[3])):
        (row,) = np.flatnonzero(after.ids == memory_id)
        assert after.matrix[row] == pytest.approx(embed_text(text), abs=1e-6)
    assert_searches_like_brute_force(owner, [FACTS[1], FACTS[3], FACTS[0]])


def test_a_write_rolled_back_leaves_the_copy_as_it_was(owner: User, reads: list[Read]) -> None:
    background(owner)
    memory = memory_create(owner=owner, content=FACTS[0]).memory
    before = owner_vectors.owner_vectors(owner.pk)
    assert before is not None
    reads.clear()

    class Abandoned(Exception):
        pass

    with pytest.raises(Abandoned), transaction.atomic():
        memory_create(owner=owner, content=FACTS[1])
        memory_update_content(owner=owner, memory_id=memory.pk, content=FACTS[2])
        raise Abandoned

    assert version_of(owner) == before.version
    assert owner_vectors.owner_vectors(owner.pk) is before and reads == []
    assert_searches_like_brute_force(owner, [FACTS[0], FACTS[1], FACTS[2]])


def test_many_rows_written_since_the_copy_are_read_all_again(owner: User, reads: list[Read]) -> None:
    """Past a quarter of the owner's rows, one full read rather than a merge."""
    background(owner, rows=8)
    before = owner_vectors.owner_vectors(owner.pk)
    assert before is not None
    reads.clear()
    rewritten = sorted(Memory.objects.filter(owner=owner).values_list("id", flat=True))[:3]
    for memory_id, text in zip(rewritten, FACTS, strict=False):  # 3 of 8 rows: more than a quarter
        memory_update_content(owner=owner, memory_id=memory_id, content=text)

    after = owner_vectors.owner_vectors(owner.pk)
    # The changed rows are read up to one past the quarter (2 of 8), then every row.
    assert [read.since_version for read in reads] == [before.version, None]
    assert reads[0].ids == rewritten and len(reads[1].ids) == 8
    assert after is not None and after.ids.tolist() == reads[1].ids
    assert_searches_like_brute_force(owner, FACTS[:3])
