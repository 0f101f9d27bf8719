"""Semantic memories: services, search under filters, and search that sees at once what
another process wrote."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import User
from memory.embeddings import EMBEDDING_MODEL, embed_text, embed_texts
from memory.models.semantic import DecayPolicy, Memory
from memory.selectors.semantic import memory_search, memory_status
from memory.services.semantic import (
    CANNOT_REINFORCE_DELETED,
    CANNOT_REINFORCE_PERMANENT,
    InvalidOperation,
    MemoryNotFound,
    content_hash,
    memory_create,
    memory_delete,
    memory_reinforce,
)
from projects.models import Project

pytestmark = pytest.mark.django_db

FACTS = [
    "The production database is backed up every night at 2am.",
    "Alice is allergic to peanuts.",
    "Our API rate limit is 100 requests per minute per token.",
    "The office cat is called Biscuit.",
    "Deployments are frozen on Fridays.",
]


def ids(results: list) -> list[int]:
    return [r.memory.pk for r in results]


def write_directly(owner: User, content: str, **fields: object) -> Memory:
    """A row as another process would write it: straight to the database."""
    now = timezone.now()
    values: dict[str, object] = {
        "created_at": now,
        "last_reinforced_at": now,
        "embedding": embed_text(content),
        "embedding_model": EMBEDDING_MODEL,
        "content_hash": content_hash(content),
        **fields,
    }
    return Memory.objects.create(owner=owner, content=content, **values)


def test_paraphrase_with_no_word_in_common_ranks_first(owner: User) -> None:
    stored = {text: memory_create(owner=owner, content=text)[0] for text in FACTS}
    cases = {
        "When do we take copies of the data store?": FACTS[0],
        "Which nuts make her ill?": FACTS[1],
        "How many calls can a client make in sixty seconds?": FACTS[2],
        "What name did we give our feline?": FACTS[3],
        "Can I ship code at the end of the week?": FACTS[4],
    }
    for query, expected in cases.items():
        results = memory_search(user=owner, query=query, limit=3)
        assert results[0].memory.pk == stored[expected].pk, query
        assert results[0].score == pytest.approx(results[0].similarity * results[0].confidence)


def test_search_is_ranked_by_similarity_times_confidence(owner: User) -> None:
    now = timezone.now()
    fresh, _, _ = memory_create(owner=owner, content="Tea is served at four.", now=now)
    faded, _, _ = memory_create(
        owner=owner,
        content="Tea is served at four o'clock sharp.",
        decay_policy=DecayPolicy.CONTEXTUAL,
        half_life_hours=10,
        now=now - timedelta(hours=9),
    )
    results = memory_search(user=owner, query="Tea is served at four o'clock sharp.", now=now)
    assert ids(results) == [fresh.pk, faded.pk]
    assert results[1].similarity > results[0].similarity
    assert results[1].confidence == pytest.approx(0.1)
    assert all(r.score == pytest.approx(r.similarity * r.confidence) for r in results)


def test_min_confidence_leaves_faded_memories_out(owner: User) -> None:
    now = timezone.now()
    kept, _, _ = memory_create(owner=owner, content="Standup is at nine.", decay_policy=DecayPolicy.PERMANENT, now=now)
    faded, _, _ = memory_create(
        owner=owner, content="Standup moved to ten.", half_life_hours=10, now=now - timedelta(hours=8)
    )
    assert set(ids(memory_search(user=owner, query="standup time", now=now))) == {kept.pk, faded.pk}
    assert ids(memory_search(user=owner, query="standup time", min_confidence=0.5, now=now)) == [kept.pk]
    # Reinforcing restores it.
    memory_reinforce(owner=owner, memory_id=faded.pk, now=now)
    assert faded.pk in ids(memory_search(user=owner, query="standup time", min_confidence=0.5, now=now))


def test_filters_are_exact(owner: User, project: Project) -> None:
    text = "Use tabs, not spaces."
    plain, _, _ = memory_create(owner=owner, content=text)
    coder, _, _ = memory_create(owner=owner, content=text, agent="coder")
    persona, _, _ = memory_create(owner=owner, content=text, personality="terse")
    in_project, _, _ = memory_create(owner=owner, content=text, project=project)
    shared, _, _ = memory_create(owner=owner, content=text, is_global=True)
    typed, _, _ = memory_create(owner=owner, content=text + " Always.", memory_type="preference")
    everything = {plain.pk, coder.pk, persona.pk, in_project.pk, shared.pk, typed.pk}

    def found(**filters: object) -> set[int]:
        return set(ids(memory_search(user=owner, query="indentation style", limit=50, **filters)))  # type: ignore[arg-type]

    assert found() == everything
    assert found(agent="coder") == {coder.pk}
    assert found(agent="reviewer") == set()
    assert found(personality="terse") == {persona.pk}
    assert found(project_id=project.pk) == {in_project.pk}
    assert found(is_global=True) == {shared.pk}
    assert found(is_global=False) == everything - {shared.pk}
    assert found(memory_type="preference") == {typed.pk}
    assert found(memory_type="note", agent="coder") == {coder.pk}


def test_other_users_memories_are_never_found(owner: User, other_user: User) -> None:
    memory_create(owner=other_user, content="Bob's secret: the vault code is 1234.")
    mine, _, _ = memory_create(owner=owner, content="My locker code is 99.")
    assert ids(memory_search(user=owner, query="vault code", limit=50)) == [mine.pk]


def test_soft_deleted_memories_are_never_returned(owner: User) -> None:
    memory, _, _ = memory_create(owner=owner, content="The staging server is called hermes.")
    assert ids(memory_search(user=owner, query="staging server name")) == [memory.pk]
    memory_delete(owner=owner, memory_id=memory.pk)
    memory_delete(owner=owner, memory_id=memory.pk)  # idempotent
    assert memory_search(user=owner, query="staging server name") == []
    memory.refresh_from_db()
    assert memory.is_deleted and memory.deleted_at is not None


def test_dedup_returns_and_reinforces_the_existing_memory(owner: User, project: Project) -> None:
    then = timezone.now() - timedelta(hours=5)
    first, created, _ = memory_create(owner=owner, content="Prefers  dark mode.", now=then)
    assert created
    again, created, _ = memory_create(owner=owner, content="  prefers dark MODE. ")
    assert not created
    assert again.pk == first.pk
    assert again.reinforce_count == 1 and again.last_reinforced_at > then
    # Another scope is another memory; so is one stored after a delete.
    _, created, _ = memory_create(owner=owner, content="Prefers dark mode.", project=project)
    assert created
    memory_delete(owner=owner, memory_id=first.pk)
    replacement, created, _ = memory_create(owner=owner, content="Prefers dark mode.")
    assert created and replacement.pk != first.pk
    assert Memory.objects.filter(owner=owner).count() == 3


def test_reinforce_resets_the_clock_and_counts(owner: User) -> None:
    then = timezone.now() - timedelta(hours=3)
    memory, _, _ = memory_create(owner=owner, content="Lunch is at noon.", now=then)
    now = timezone.now()
    memory = memory_reinforce(owner=owner, memory_id=memory.pk, now=now)
    assert memory.last_reinforced_at == now
    assert memory.created_at == then
    assert memory.reinforce_count == 1


def test_reinforce_errors(owner: User, other_user: User) -> None:
    permanent, _, _ = memory_create(owner=owner, content="Pi is about 3.14.", decay_policy=DecayPolicy.PERMANENT)
    with pytest.raises(InvalidOperation) as error:
        memory_reinforce(owner=owner, memory_id=permanent.pk)
    assert error.value.message == CANNOT_REINFORCE_PERMANENT
    assert error.value.code == "invalid_operation" and error.value.status_code == 400

    deleted, _, _ = memory_create(owner=owner, content="Old fact.")
    memory_delete(owner=owner, memory_id=deleted.pk)
    with pytest.raises(InvalidOperation) as error:
        memory_reinforce(owner=owner, memory_id=deleted.pk)
    assert error.value.message == CANNOT_REINFORCE_DELETED

    for owner_, memory_id in ((owner, 10**9), (other_user, permanent.pk)):
        with pytest.raises(MemoryNotFound) as missing:
            memory_reinforce(owner=owner_, memory_id=memory_id)
        assert missing.value.code == "memory_not_found" and missing.value.status_code == 404


def test_writes_by_another_process_are_seen_by_the_next_search(owner: User) -> None:
    mine, _, _ = memory_create(owner=owner, content="The build server runs Debian.")
    assert ids(memory_search(user=owner, query="build machine operating system")) == [mine.pk]

    # Added elsewhere: a plain INSERT, through no service of this process.
    other = write_directly(owner, "Our CI machines use Ubuntu 24.04.")
    assert set(ids(memory_search(user=owner, query="build machine operating system"))) == {mine.pk, other.pk}

    # Reinforced elsewhere: the new clock counts at once.
    now = timezone.now()
    faded = write_directly(
        owner,
        "Coffee machine is broken.",
        created_at=now - timedelta(hours=20),
        last_reinforced_at=now - timedelta(hours=20),
        half_life_hours=24,
    )
    assert faded.pk not in ids(memory_search(user=owner, query="coffee machine", min_confidence=0.5, limit=50))
    Memory.objects.filter(pk=faded.pk).update(last_reinforced_at=now, updated_at=now)
    assert ids(memory_search(user=owner, query="coffee machine", min_confidence=0.5, limit=1)) == [faded.pk]

    # Changed elsewhere: new text, new vector.
    text = "The espresso maker got repaired."
    Memory.objects.filter(pk=faded.pk).update(content=text, embedding=embed_text(text), updated_at=timezone.now())
    top = memory_search(user=owner, query="coffee machine", limit=1)[0]
    assert top.memory.pk == faded.pk and top.memory.content == text

    # Soft-deleted elsewhere.
    Memory.objects.filter(pk=other.pk).update(is_deleted=True, deleted_at=now, updated_at=timezone.now())
    assert other.pk not in ids(memory_search(user=owner, query="build machine operating system", limit=50))

    # Written without touching updated_at: search reads the rows, not a log of changes.
    late = write_directly(owner, "The build server has 64 GB of RAM.")
    Memory.objects.filter(pk=late.pk).update(updated_at=now - timedelta(days=5))
    assert late.pk in ids(memory_search(user=owner, query="build server memory size", limit=50))

    # Deleted outright (a cascade).
    Memory.objects.filter(pk=mine.pk).delete()
    assert mine.pk not in ids(memory_search(user=owner, query="build machine operating system", limit=50))


def test_a_hit_deleted_outright_is_replaced_by_the_next_best(owner: User) -> None:
    for text in (
        "Deployments are frozen on Fridays.",
        "No deploys on Friday afternoons.",
        "Releases go out on Tuesdays.",
    ):
        write_directly(owner, text)
    query = "when are we not allowed to deploy"
    ranking = ids(memory_search(user=owner, query=query, limit=3))
    assert len(ranking) == 3
    Memory.objects.filter(pk=ranking[0]).delete()
    assert ids(memory_search(user=owner, query=query, limit=2)) == ranking[1:]


def test_status_counts_what_search_can_find(owner: User, other_user: User) -> None:
    kept = write_directly(owner, "The office cat is called Biscuit.")
    write_directly(owner, "An old model's memory.", embedding_model="another-model")
    deleted = write_directly(owner, "Alice is allergic to peanuts.")
    memory_delete(owner=owner, memory_id=deleted.pk)
    write_directly(other_user, "Bob's memory.")
    status = memory_status(user=owner)
    assert (status["memories"], status["deleted"], status["index_size"]) == (2, 1, 1)
    assert status["vector_store"] == ("pgvector-exact" if connection.vendor == "postgresql" else "sqlite-numpy-exact")
    assert ids(memory_search(user=owner, query="memory", limit=50)) == [kept.pk]


def test_top_10_equals_exact_recomputation_from_the_rows(owner: User, other_user: User) -> None:
    texts = [f"{topic} note {i}" for i in range(6) for topic in ("database", "billing", "travel", "music", "garden")]
    vectors = embed_texts(texts)
    now = timezone.now()
    rows = [
        Memory(
            owner=owner if i % 4 else other_user,
            content=text,
            content_hash=content_hash(text),
            decay_policy=[DecayPolicy.PERMANENT, DecayPolicy.CONTEXTUAL, DecayPolicy.REINFORCEABLE][i % 3],
            half_life_hours=48,
            created_at=now - timedelta(hours=i),
            last_reinforced_at=now - timedelta(hours=i // 2),
            embedding=vector,
            embedding_model=EMBEDDING_MODEL,
            is_deleted=i % 7 == 0,
        )
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]
    Memory.objects.bulk_create(rows)
    query = "storing records in tables"
    results = memory_search(user=owner, query=query, limit=10, now=now)

    # Brute force straight from the database rows.
    from memory.decay import compute_confidence

    q = embed_text(query)
    expected = []
    for m in Memory.objects.filter(owner=owner, is_deleted=False):
        similarity = float(m.embedding @ q)
        confidence = compute_confidence(m.decay_policy, m.created_at, m.last_reinforced_at, m.half_life_hours, now)
        expected.append((similarity * confidence, m.pk, similarity, confidence))
    expected.sort(key=lambda e: -e[0])
    assert ids(results) == [e[1] for e in expected[:10]]
    for result, (score, _, similarity, confidence) in zip(results, expected, strict=False):
        assert result.score == pytest.approx(score, abs=1e-6)
        assert result.similarity == pytest.approx(similarity, abs=1e-6)
        assert result.confidence == pytest.approx(confidence)
    assert len(results) == 10
