"""memory_recall: the memories an agent is given before a call on a project."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone
from django.utils.html import escape

from memory.embeddings import EMBEDDING_MODEL, embed_text
from memory.models.semantic import DecayPolicy, Memory, MemorySource
from memory.selectors.semantic import memory_recall
from memory.services.semantic import memory_create, memory_delete
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db

QUERY = "Add an endpoint that lists orders as JSON. Return the signed-in user's orders from /api/orders."
LESSON = "JSON endpoints return ISO 8601 dates"


def recalled(owner, project, agent: str = "coder", **kwargs) -> list[int]:
    return [r.memory.pk for r in memory_recall(user=owner, project=project, agent=agent, query=QUERY, **kwargs)]


def test_this_projects_and_global_memories_unscoped_or_the_agents(owner, project) -> None:
    elsewhere = ProjectFactory(owner=owner)
    here, _, _ = memory_create(owner=owner, content=LESSON, project=project)
    shared, _, _ = memory_create(owner=owner, content=LESSON, is_global=True)
    mine, _, _ = memory_create(owner=owner, content=LESSON, project=project, agent="coder")
    global_mine, _, _ = memory_create(owner=owner, content=LESSON, is_global=True, agent="coder")
    memory_create(owner=owner, content=LESSON, project=project, agent="reviewer")
    there, _, _ = memory_create(owner=owner, content=LESSON, project=elsewhere)
    memory_create(owner=owner, content=LESSON)  # no project and not global: not a project's lesson

    assert set(recalled(owner, project)) == {here.pk, shared.pk, mine.pk, global_mine.pk}
    assert set(recalled(owner, project, agent="planner")) == {here.pk, shared.pk}
    assert set(recalled(owner, elsewhere, agent="planner")) == {there.pk, shared.pk}
    assert set(recalled(owner, None)) == {shared.pk, global_mine.pk}


def test_never_another_users_nor_deleted_nor_faded(owner, other_user, project) -> None:
    theirs_project = ProjectFactory(owner=other_user)
    memory_create(owner=other_user, content=LESSON, is_global=True)
    memory_create(owner=other_user, content=LESSON, project=theirs_project)
    gone, _, _ = memory_create(owner=owner, content=LESSON, project=project)
    memory_delete(owner=owner, memory_id=gone.pk)
    long_ago = timezone.now() - timedelta(days=30)
    memory_create(
        owner=owner,
        content=LESSON,
        is_global=True,
        decay_policy=DecayPolicy.CONTEXTUAL,
        half_life_hours=1,
        now=long_ago,
    )
    assert recalled(owner, project) == []
    assert recalled(owner, project, min_score=0.0) == []  # faded to nothing: not even at 0


def test_ranked_by_score_above_the_minimum_and_at_most_the_limit(owner, project, settings) -> None:
    close, _, _ = memory_create(owner=owner, content=LESSON, project=project)
    near, _, _ = memory_create(owner=owner, content="List endpoints are paginated with cursors", project=project)
    memory_create(owner=owner, content="Deploys go out on Tuesdays", project=project)
    # Half as confident, so ranked lower than the same text fresh.
    half, _, _ = memory_create(
        owner=owner,
        content=LESSON + " in UTC",
        project=project,
        decay_policy=DecayPolicy.CONTEXTUAL,
        half_life_hours=10,
        now=timezone.now() - timedelta(hours=5),
    )
    results = memory_recall(user=owner, project=project, agent="coder", query=QUERY)
    assert [r.memory.pk for r in results][:1] == [close.pk]
    assert {r.memory.pk for r in results} == {close.pk, near.pk, half.pk}  # not the unrelated one
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    assert all(r.score >= settings.MEMORY_RECALL_MIN_SCORE for r in results)

    assert recalled(owner, project, limit=1) == [close.pk]
    settings.MEMORY_RECALL_LIMIT = 2
    assert len(recalled(owner, project)) == 2
    settings.MEMORY_RECALL_LIMIT = 0
    assert recalled(owner, project) == []
    assert recalled(owner, project, min_score=0.99, limit=8) == []


def test_the_memories_a_run_wrote_are_not_recalled_by_that_run(owner, project) -> None:
    earlier, _, _ = memory_create(owner=owner, content=LESSON, project=project, source_run_id=7)
    own, _, _ = memory_create(owner=owner, content=LESSON, project=project, agent="coder", source_run_id=8)
    assert set(recalled(owner, project, not_from_run=8)) == {earlier.pk}
    assert set(recalled(owner, project, not_from_run=7)) == {own.pk}
    assert set(recalled(owner, project)) == {earlier.pk, own.pk}


def test_the_query_is_embedded_once_for_all_the_scopes(owner, project, monkeypatch) -> None:
    from memory.selectors import semantic

    memory_create(owner=owner, content=LESSON, project=project, agent="coder")
    memory_create(owner=owner, content=LESSON, is_global=True)
    embedded: list[str] = []
    real = semantic.embed_text

    def counting(text: str):
        embedded.append(text)
        return real(text)

    monkeypatch.setattr(semantic, "embed_text", counting)
    assert len(recalled(owner, project)) == 2
    assert embedded == [QUERY]


def test_a_run_that_wrote_many_memories_still_recalls_the_limit_of_others(owner, project, settings) -> None:
    """The run's own memories are the closest to the query, and more than any spare a
    search could ask for beyond the limit: the limit is still filled with the others."""
    settings.MEMORY_RECALL_LIMIT = 8
    query = embed_text(QUERY)
    rng = np.random.default_rng(7)
    now = timezone.now()

    def near_the_query(similarity: float) -> np.ndarray:
        noise = rng.standard_normal(query.shape[0])
        noise -= noise.dot(query) * query
        vector = similarity * query + np.sqrt(1 - similarity**2) * noise / np.linalg.norm(noise)
        return vector.astype(np.float32)

    def lesson(number: int, similarity: float, **kwargs) -> int:
        return Memory.objects.create(
            owner=owner,
            content=f"lesson {number}",
            content_hash=f"{number:064d}",
            project=project,
            embedding=near_the_query(similarity),
            embedding_model=EMBEDDING_MODEL,
            created_at=now,
            last_reinforced_at=now,
            **kwargs,
        ).pk

    own = {lesson(n, 0.95, agent="coder", source=MemorySource.AGENT, source_run_id=42) for n in range(6)}
    others = {lesson(n, 0.5, source_run_id=41 if n % 2 else None) for n in range(6, 16)}

    got = recalled(owner, project, not_from_run=42)
    assert len(got) == 8
    assert set(got) <= others
    # Asked by another run, the six come first.
    assert set(recalled(owner, project, not_from_run=41)[:6]) == own


def test_a_projects_lesson_reaches_another_project_only_once_a_person_shares_it(
    owner, project, owner_client, other_client, owner_session_client
) -> None:
    elsewhere = ProjectFactory(owner=owner)
    lesson, _, _ = memory_create(owner=owner, content=LESSON, project=project, agent="coder")
    assert recalled(owner, elsewhere) == []
    url = f"/api/memory/memories/{lesson.pk}"
    assert other_client.post(f"{url}/share").status_code == 404
    shared = owner_client.post(f"{url}/share")
    assert shared.status_code == 200 and shared.json()["is_global"] is True
    assert recalled(owner, elsewhere) == [lesson.pk]
    # The page offers to keep it to its project again; so does the API.
    page = owner_session_client.get("/memory/recall")
    assert f"Keep to {escape(project.name)}" in page.content.decode()
    assert owner_client.post(f"{url}/unshare").json()["is_global"] is False
    assert recalled(owner, elsewhere) == []
    assert recalled(owner, project) == [lesson.pk]
    nowhere, _, _ = memory_create(owner=owner, content="A memory of no project", is_global=True)
    refused = owner_client.post(f"/api/memory/memories/{nowhere.pk}/unshare")
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_operation"
