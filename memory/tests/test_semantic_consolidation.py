"""Near-duplicate memories consolidate; where each memory came from; which runs used it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import User
from memory.embeddings import embed_text, vector_from_bytes
from memory.models.semantic import DecayPolicy, Memory, MemorySource, MemoryUse
from memory.selectors.semantic import memory_fades_at, memory_search, memory_uses_get
from memory.services.semantic import (
    CANNOT_EDIT_DELETED,
    CANNOT_PIN_DELETED,
    InvalidOperation,
    memory_create,
    memory_delete,
    memory_pin,
    memory_update_content,
    memory_uses_record,
)
from projects.models import Project

pytestmark = pytest.mark.django_db

SHORT = "Run the tests with pytest before committing."
LONGER = "Always run the tests with pytest before you commit anything."  # cosine 0.925 to SHORT
RELATED = "Run the linter with ruff before committing."  # cosine 0.40 to SHORT


def test_near_duplicate_reinforces_and_keeps_the_longer_wording(owner: User) -> None:
    then = timezone.now() - timedelta(hours=10)
    first = memory_create(owner=owner, content=SHORT, agent="coder", now=then)
    assert first.created and not first.consolidated

    second = memory_create(owner=owner, content=LONGER, agent="coder")
    assert (second.created, second.consolidated) == (False, True)
    assert second.memory.pk == first.memory.pk
    memory = Memory.objects.get()
    assert memory.content == LONGER and memory.reinforce_count == 1
    assert memory.last_reinforced_at > then + timedelta(hours=9)
    # The longer wording's embedding came with it: search finds it by that text.
    assert vector_from_bytes(memory.embedding) == pytest.approx(embed_text(LONGER), abs=1e-5)
    (hit,) = memory_search(user=owner, query=LONGER, agent="coder")
    assert hit.memory.pk == memory.pk and hit.similarity == pytest.approx(1.0, abs=1e-4)

    # A shorter rephrasing reinforces again, but does not replace the longer text.
    third = memory_create(owner=owner, content="Run the tests with pytest before you commit.", agent="coder")
    assert third.consolidated and Memory.objects.get().content == LONGER
    assert Memory.objects.get().reinforce_count == 2


def test_below_the_threshold_two_memories(owner: User, settings) -> None:
    memory_create(owner=owner, content=SHORT)
    assert memory_create(owner=owner, content=RELATED).created
    assert Memory.objects.count() == 2
    # The threshold is the setting's: at 0.95, 0.925 similar is not "the same".
    settings.MEMORY_CONSOLIDATE_SIMILARITY = 0.95
    assert memory_create(owner=owner, content=LONGER).created
    assert Memory.objects.count() == 3


@pytest.mark.parametrize(
    "scope",
    [
        {"agent": "reviewer"},
        {"personality": "terse"},
        {"is_global": True},
        {"memory_type": "preference"},
        {"project": "project"},
    ],
)
def test_other_scopes_keep_their_own_memory(owner: User, project: Project, scope: dict[str, object]) -> None:
    if scope.get("project"):
        scope = {"project": project}
    memory_create(owner=owner, content=SHORT)
    assert memory_create(owner=owner, content=LONGER, **scope).created  # type: ignore[arg-type]
    assert Memory.objects.count() == 2


def test_a_project_memory_consolidates_only_within_its_project(owner: User, project: Project) -> None:
    memory_create(owner=owner, content=SHORT)  # of no project
    in_project = memory_create(owner=owner, content=SHORT, project=project)
    assert in_project.created
    assert memory_create(owner=owner, content=LONGER, project=project).memory.pk == in_project.memory.pk
    assert Memory.objects.filter(project=None).get().content == SHORT


def test_another_owners_memory_is_never_consolidated_into(owner: User, other_user: User) -> None:
    theirs = memory_create(owner=other_user, content=SHORT).memory
    assert memory_create(owner=owner, content=LONGER).created
    theirs.refresh_from_db()
    assert (theirs.content, theirs.reinforce_count) == (SHORT, 0)


def test_deleted_and_faded_memories_are_not_consolidated_into(owner: User) -> None:
    deleted = memory_create(owner=owner, content=SHORT).memory
    memory_delete(owner=owner, memory_id=deleted.pk)
    long_ago = timezone.now() - timedelta(days=365)
    faded = memory_create(owner=owner, content="Run the tests with pytest before you commit.", now=long_ago).memory
    fresh = memory_create(owner=owner, content=LONGER)
    assert fresh.created
    faded.refresh_from_db()
    assert faded.reinforce_count == 0 and faded.last_reinforced_at == long_ago


def test_exact_duplicates_still_go_by_their_hash(owner: User) -> None:
    first = memory_create(owner=owner, content=SHORT).memory
    again = memory_create(owner=owner, content="  run the tests with PYTEST before committing. ")
    assert (again.created, again.consolidated, again.memory.pk) == (False, False, first.pk)
    assert Memory.objects.get().content == SHORT


def test_source_fields_are_stored_and_the_note_shortened(owner: User) -> None:
    memory = memory_create(
        owner=owner, content=SHORT, source=MemorySource.FINDING, source_run_id=42, source_note="x" * 600
    ).memory
    memory.refresh_from_db()
    assert (memory.source, memory.source_run_id) == ("finding", 42)
    assert len(memory.source_note) == 500 and memory.source_note.endswith("…")
    assert memory_create(owner=owner, content=RELATED).memory.source == MemorySource.PERSON


def test_consolidation_keeps_the_first_source(owner: User) -> None:
    memory_create(owner=owner, content=SHORT)
    result = memory_create(owner=owner, content=LONGER, source=MemorySource.AGENT, source_run_id=7)
    assert result.consolidated
    assert (result.memory.source, result.memory.source_run_id) == (MemorySource.PERSON, None)


def test_uses_are_recorded_for_the_owners_memories_only(owner: User, other_user: User) -> None:
    mine = memory_create(owner=owner, content=SHORT).memory
    theirs = memory_create(owner=other_user, content=RELATED).memory
    start = timezone.now()
    recorded = memory_uses_record(owner=owner, memory_ids=[mine.pk, theirs.pk, 999_999], run_id=5, agent="coder")
    assert recorded == 1
    for run_id, minutes in ((6, 1), (7, 2), (8, 3)):
        memory_uses_record(
            owner=owner, memory_ids=[mine.pk], run_id=run_id, agent="planner", now=start + timedelta(minutes=minutes)
        )
    assert not MemoryUse.objects.filter(memory=theirs).exists()
    uses = memory_uses_get(memory=mine, latest=2)
    assert uses.count == 4
    assert [(use.run_id, use.agent) for use in uses.latest] == [(8, "planner"), (7, "planner")]


def test_pin_unpin_and_fade_time(owner: User) -> None:
    now = timezone.now()
    memory = memory_create(owner=owner, content=SHORT, decay_policy=DecayPolicy.CONTEXTUAL, half_life_hours=10, now=now)
    assert memory_fades_at(memory=memory.memory) == now + timedelta(hours=10)
    pinned = memory_pin(owner=owner, memory_id=memory.memory.pk, pinned=True)
    assert pinned.decay_policy == DecayPolicy.PERMANENT and memory_fades_at(memory=pinned) is None
    assert memory_pin(owner=owner, memory_id=pinned.pk, pinned=True).unpinned_policy == DecayPolicy.CONTEXTUAL
    unpinned = memory_pin(owner=owner, memory_id=pinned.pk, pinned=False)
    assert (unpinned.decay_policy, unpinned.unpinned_policy) == (DecayPolicy.CONTEXTUAL, "")
    # Created permanent: unpinning makes it reinforceable, fading from now.
    born = memory_create(owner=owner, content=RELATED, decay_policy=DecayPolicy.PERMANENT, half_life_hours=5).memory
    freed = memory_pin(owner=owner, memory_id=born.pk, pinned=False)
    assert freed.decay_policy == DecayPolicy.REINFORCEABLE
    assert memory_fades_at(memory=freed) == freed.last_reinforced_at + timedelta(hours=5)
    memory_delete(owner=owner, memory_id=born.pk)
    with pytest.raises(InvalidOperation, match=CANNOT_PIN_DELETED):
        memory_pin(owner=owner, memory_id=born.pk, pinned=True)


def test_edit_re_embeds(owner: User) -> None:
    memory = memory_create(owner=owner, content=SHORT).memory
    edited = memory_update_content(owner=owner, memory_id=memory.pk, content="  Deploys happen on Fridays.  ")
    assert edited.content == "Deploys happen on Fridays."
    assert vector_from_bytes(edited.embedding) == pytest.approx(embed_text("Deploys happen on Fridays."), abs=1e-5)
    (hit,) = memory_search(user=owner, query="When do we deploy?")
    assert hit.memory.pk == memory.pk
    memory_delete(owner=owner, memory_id=memory.pk)
    with pytest.raises(InvalidOperation, match=CANNOT_EDIT_DELETED):
        memory_update_content(owner=owner, memory_id=memory.pk, content="Anything.")


def test_consolidation_through_the_api(owner_client: APIClient) -> None:
    url = "/api/memory/memories"
    first = owner_client.post(url, {"content": SHORT}, format="json")
    assert first.status_code == 201 and first.json()["consolidated"] is False
    second = owner_client.post(url, {"content": LONGER}, format="json")
    assert second.status_code == 200, second.content
    body = second.json()
    assert (body["created"], body["consolidated"], body["id"]) == (False, True, first.json()["id"])
    assert body["content"] == LONGER and body["reinforce_count"] == 1
    exact = owner_client.post(url, {"content": LONGER.upper()}, format="json")
    assert exact.status_code == 200 and exact.json()["consolidated"] is False
    assert owner_client.post(url, {"content": RELATED}, format="json").status_code == 201
    assert Memory.objects.count() == 2
