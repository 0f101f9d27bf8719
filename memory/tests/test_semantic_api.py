"""The semantic memory API, the "Memories" page and the admin, for each persona."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import User
from memory.models.semantic import DecayPolicy, Memory
from memory.services.semantic import CANNOT_REINFORCE_PERMANENT, memory_create
from memory.vector_store import semantic_index
from projects.models import Project
from tests.api_helpers import assert_error, field_errors

pytestmark = pytest.mark.django_db

MEMORIES = "/api/memory/memories"
SEARCH = "/api/memory/memories/search"


@pytest.fixture(autouse=True)
def _fresh_index() -> None:
    semantic_index().reset()


def test_create_then_dedup(owner_client: APIClient, project: Project) -> None:
    body = {"content": "The customer wants weekly reports.", "agent": "planner", "project": project.pk}
    response = owner_client.post(MEMORIES, body, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["created"] is True
    assert created["confidence"] == pytest.approx(1.0)
    assert created["decay_policy"] == "reinforceable" and created["project"] == project.pk
    assert "embedding" not in created

    again = owner_client.post(MEMORIES, {**body, "content": "the customer wants  WEEKLY reports."}, format="json")
    assert again.status_code == 200
    assert again.json()["created"] is False and again.json()["id"] == created["id"]
    assert again.json()["reinforce_count"] == 1
    assert Memory.objects.count() == 1


def test_create_validation(owner_client: APIClient, other_project: Project) -> None:
    errors = field_errors(
        owner_client.post(
            MEMORIES,
            {
                "content": 5,
                "decay_policy": "forever",
                "half_life_hours": 0,
                "project": other_project.pk,
                "is_global": "yes",
            },
            format="json",
        )
    )
    assert set(errors) == {"content", "decay_policy", "half_life_hours", "project", "is_global"}
    assert set(field_errors(owner_client.post(MEMORIES, {}, format="json"))) == {"content"}
    assert "content" in field_errors(owner_client.post(MEMORIES, {"content": "   "}, format="json"))


def test_search_response(owner_client: APIClient, owner: User) -> None:
    memory, _ = memory_create(owner=owner, content="The cat sleeps on the keyboard.", memory_type="observation")
    memory_create(owner=owner, content="Quarterly taxes are due in April.")
    response = owner_client.get(SEARCH, {"q": "Where does the kitten nap?", "limit": "1", "type": "observation"})
    assert response.status_code == 200
    (result,) = response.json()["results"]
    assert set(result) == {
        "id", "content", "similarity", "confidence", "score", "memory_type", "decay_policy", "agent",
        "personality", "project", "is_global", "created_at", "last_reinforced_at",
    }  # fmt: skip
    assert result["id"] == memory.pk
    assert result["score"] == pytest.approx(result["similarity"] * result["confidence"], abs=1e-5)
    assert owner_client.get(SEARCH, {"q": "cat", "global": "true"}).json() == {"results": []}
    assert len(owner_client.get(SEARCH, {"q": "cat", "global": "false"}).json()["results"]) == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "q"),
        ({"q": ""}, "q"),
        ({"q": "x", "limit": 0}, "limit"),
        ({"q": "x", "limit": 51}, "limit"),
        ({"q": "x", "min_confidence": 1.5}, "min_confidence"),
        ({"q": "x", "min_confidence": -0.1}, "min_confidence"),
        ({"q": "x", "global": "maybe"}, "global"),
        ({"q": "x", "project": "abc"}, "project"),
    ],
)
def test_search_validation(owner_client: APIClient, params: dict[str, Any], field: str) -> None:
    assert field in field_errors(owner_client.get(SEARCH, params))


def test_detail_reinforce_delete(owner_client: APIClient, owner: User) -> None:
    memory, _ = memory_create(owner=owner, content="Meetings end at five.")
    url = f"{MEMORIES}/{memory.pk}"
    assert owner_client.get(url).json()["id"] == memory.pk

    reinforced = owner_client.post(f"{url}/reinforce")
    assert reinforced.status_code == 200 and reinforced.json()["reinforce_count"] == 1

    assert owner_client.delete(url).status_code == 204
    assert owner_client.get(url).json()["is_deleted"] is True
    assert owner_client.get(SEARCH, {"q": "meetings"}).json() == {"results": []}
    assert_error(owner_client.post(f"{url}/reinforce"), 400, "invalid_operation")

    permanent, _ = memory_create(owner=owner, content="Water boils at 100C.", decay_policy=DecayPolicy.PERMANENT)
    assert_error(
        owner_client.post(f"{MEMORIES}/{permanent.pk}/reinforce"), 400, "invalid_operation", CANNOT_REINFORCE_PERMANENT
    )
    for missing in (f"{MEMORIES}/999999", f"{MEMORIES}/abc"):
        assert_error(owner_client.get(missing), 404, "memory_not_found")


def test_status(owner_client: APIClient, owner: User) -> None:
    memory_create(owner=owner, content="One.")
    gone, _ = memory_create(owner=owner, content="Two.")
    owner_client.delete(f"{MEMORIES}/{gone.pk}")
    body = owner_client.get("/api/memory/status").json()
    assert body["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert body["dimensions"] == 384
    assert (body["memories"], body["deleted"], body["index_size"]) == (1, 1, 1)


def test_other_user_sees_none_of_it(other_client: APIClient, owner: User) -> None:
    memory, _ = memory_create(owner=owner, content="Alice's bank is in Zurich.")
    url = f"{MEMORIES}/{memory.pk}"
    assert_error(other_client.get(url), 404, "memory_not_found")
    assert_error(other_client.delete(url), 404, "memory_not_found")
    assert_error(other_client.post(f"{url}/reinforce"), 404, "memory_not_found")
    assert other_client.get(SEARCH, {"q": "Where does Alice bank?"}).json() == {"results": []}
    assert other_client.get("/api/memory/status").json()["memories"] == 0
    assert not Memory.objects.get(pk=memory.pk).is_deleted


def test_anonymous_is_refused(anon_client: APIClient, owner: User) -> None:
    memory, _ = memory_create(owner=owner, content="Secret.")
    for method, url in [
        ("post", MEMORIES),
        ("get", f"{SEARCH}?q=secret"),
        ("get", f"{MEMORIES}/{memory.pk}"),
        ("delete", f"{MEMORIES}/{memory.pk}"),
        ("post", f"{MEMORIES}/{memory.pk}/reinforce"),
        ("get", "/api/memory/status"),
    ]:
        assert getattr(anon_client, method)(url).status_code == 401, url


# The page


@pytest.fixture
def browser(owner: User) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def test_recall_page_search_add_reinforce_delete(browser: Client, owner: User) -> None:
    memory_create(owner=owner, content="The staging password rotates monthly.")
    page = browser.get("/memory/recall")
    assert page.status_code == 200
    assert b"memory_recall.css" in page.content and b"The staging password rotates monthly." in page.content

    partial = browser.get("/memory/recall/results", {"q": "credential rotation schedule"}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    assert b"The staging password rotates monthly." in partial.content
    assert b"Similarity" in partial.content and b"<html" not in partial.content

    added = browser.post("/memory/recall/add", {"content": "Prefers YAML.", "memory_type": "note",
                                                 "decay_policy": "reinforceable"})  # fmt: skip
    assert added.status_code == 302
    memory = Memory.objects.get(content="Prefers YAML.")
    assert browser.post(f"/memory/recall/{memory.pk}/reinforce", {"q": "yaml"}).status_code == 302
    assert Memory.objects.get(pk=memory.pk).reinforce_count == 1
    assert browser.post(f"/memory/recall/{memory.pk}/delete").status_code == 302
    assert Memory.objects.get(pk=memory.pk).is_deleted
    assert browser.post("/memory/recall/add", {"content": ""}).status_code == 400


def test_recall_page_personas(client: Client, other_user: User, owner: User) -> None:
    memory, _ = memory_create(owner=owner, content="Alice only.")
    assert client.get("/memory/recall").status_code == 302  # to the login page
    client.force_login(other_user)
    assert b"Alice only." not in client.get("/memory/recall").content
    assert b"Alice only." not in client.get("/memory/recall/results", {"q": "Alice"}).content
    assert client.post(f"/memory/recall/{memory.pk}/delete").status_code == 404
    assert client.post(f"/memory/recall/{memory.pk}/reinforce").status_code == 404


def test_admin_lists_memories_without_the_raw_embedding(admin_client: Client, owner: User) -> None:
    memory, _ = memory_create(owner=owner, content="Admin can see this.")
    listing = admin_client.get("/admin/memory/memory/", {"q": "admin"})
    assert listing.status_code == 200 and b"Admin can see this." in listing.content
    change = admin_client.get(f"/admin/memory/memory/{memory.pk}/change/")
    assert change.status_code == 200
    assert b"384 dimensions" in change.content
    assert b'name="embedding"' not in change.content
