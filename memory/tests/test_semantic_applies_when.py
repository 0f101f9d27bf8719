"""A memory's "applies when" line: stored with it, embedded with its content (so a
task's words find it), edited with it, and shown by the API and the page."""

from __future__ import annotations

import numpy as np
import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from accounts.models import User
from memory.embeddings import embed_text, vector_from_bytes
from memory.models.semantic import APPLIES_WHEN_MAX_LENGTH, Memory
from memory.selectors.semantic import memory_search
from memory.services.semantic import (
    APPLIES_WHEN_TOO_LONG,
    InvalidOperation,
    memory_create,
    memory_embedding_text,
    memory_update_content,
)

pytestmark = pytest.mark.django_db

LESSON = "API responses use snake_case field names, never camelCase."
from memory.tests.test_semantic_consolidation import LONGER, SHORT  # noqa: E402

WHEN = "adding or changing API endpoints, serializers or any JSON the API returns"


def stored_vector(memory: Memory) -> np.ndarray:
    memory.refresh_from_db()
    return vector_from_bytes(memory.embedding)


def test_the_line_is_stored_and_embedded_with_the_content(owner: User) -> None:
    memory = memory_create(owner=owner, content=LESSON, applies_when=f"  {WHEN}\n").memory
    assert memory.applies_when == WHEN
    assert memory_embedding_text(LESSON, WHEN) == f"{LESSON}\nApplies when: {WHEN}"
    assert np.allclose(stored_vector(memory), embed_text(f"{LESSON}\nApplies when: {WHEN}"), atol=1e-6)
    assert not np.allclose(stored_vector(memory), embed_text(LESSON), atol=1e-3)


def test_without_a_line_the_content_alone_is_embedded(owner: User) -> None:
    memory = memory_create(owner=owner, content=LESSON).memory
    assert memory.applies_when == ""
    assert np.allclose(stored_vector(memory), embed_text(LESSON), atol=1e-6)


def test_a_task_finds_the_lesson_by_its_line(owner: User) -> None:
    """The benchmark's point in one case: the task shares no word with the lesson."""
    memory_create(owner=owner, content="Times are stored in UTC; the user's zone is applied only when shown.")
    with_line = memory_create(
        owner=owner,
        content="Nothing is paginated with offsets; use the opaque cursor.",
        applies_when="writing an API endpoint that lists records",
    ).memory
    (top,) = memory_search(user=owner, query="Add an endpoint listing the invoices", limit=1)
    assert top.memory.pk == with_line.pk


def test_a_long_line_is_shortened_on_create(owner: User) -> None:
    memory = memory_create(owner=owner, content=LESSON, applies_when="x" * (APPLIES_WHEN_MAX_LENGTH + 50)).memory
    assert len(memory.applies_when) == APPLIES_WHEN_MAX_LENGTH and memory.applies_when.endswith("…")


def test_an_edit_keeps_the_line_unless_given_one(owner: User) -> None:
    memory = memory_create(owner=owner, content=LESSON, applies_when=WHEN).memory
    edited = memory_update_content(owner=owner, memory_id=memory.pk, content=LESSON + " Always.")
    assert edited.applies_when == WHEN
    assert np.allclose(stored_vector(edited), embed_text(memory_embedding_text(LESSON + " Always.", WHEN)), atol=1e-6)

    edited = memory_update_content(owner=owner, memory_id=memory.pk, content=LESSON, applies_when="")
    assert edited.applies_when == ""
    assert np.allclose(stored_vector(edited), embed_text(LESSON), atol=1e-6)

    with pytest.raises(InvalidOperation, match=APPLIES_WHEN_TOO_LONG):
        memory_update_content(
            owner=owner, memory_id=memory.pk, content=LESSON, applies_when="x" * (APPLIES_WHEN_MAX_LENGTH + 1)
        )


def test_a_near_duplicate_brings_its_line_with_the_longer_wording(owner: User) -> None:
    short, longer = SHORT, LONGER
    first = memory_create(owner=owner, content=short, applies_when="committing changes").memory
    write = memory_create(owner=owner, content=longer, applies_when="committing or pushing changes")
    assert write.consolidated and write.memory.pk == first.pk
    assert write.memory.applies_when == "committing or pushing changes"


def test_the_api_creates_shows_and_edits_the_line(owner_client: APIClient) -> None:
    client = owner_client
    created = client.post("/api/memory/memories", {"content": LESSON, "applies_when": WHEN}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["applies_when"] == WHEN
    memory_id = created.json()["id"]

    edited = client.patch(f"/api/memory/memories/{memory_id}", {"content": LESSON}, format="json")
    assert edited.status_code == 200 and edited.json()["applies_when"] == WHEN
    edited = client.patch(
        f"/api/memory/memories/{memory_id}",
        {"content": LESSON, "applies_when": "writing serializers"},
        format="json",
    )
    assert edited.json()["applies_when"] == "writing serializers"
    assert Memory.objects.get(pk=memory_id).applies_when == "writing serializers"


def test_the_page_adds_shows_and_edits_the_line(client, owner: User) -> None:
    client.force_login(owner)
    response = client.post(
        reverse("memory:recall_add"),
        {"content": LESSON, "applies_when": WHEN, "memory_type": "note", "decay_policy": "reinforceable"},
    )
    assert response.status_code == 302
    memory = Memory.objects.get(owner=owner)
    assert memory.applies_when == WHEN
    assert f"Applies when: {WHEN}" in client.get(reverse("memory:recall")).content.decode()

    page = client.get(reverse("memory:recall_edit", args=[memory.pk])).content.decode()
    assert WHEN in page
    client.post(reverse("memory:recall_edit", args=[memory.pk]), {"content": LESSON, "applies_when": "writing views"})
    memory.refresh_from_db()
    assert memory.applies_when == "writing views"
