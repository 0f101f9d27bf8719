"""The semantic memory API, the "Memories" page and the admin, for each persona."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import User
from memory.models.semantic import DecayPolicy, Memory, MemorySource
from memory.services.semantic import CANNOT_REINFORCE_PERMANENT, memory_create, memory_delete, memory_uses_record
from projects.models import Project
from tests.api_helpers import assert_error, field_errors

pytestmark = pytest.mark.django_db

MEMORIES = "/api/memory/memories"
SEARCH = "/api/memory/memories/search"


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
    memory, _, _ = memory_create(owner=owner, content="The cat sleeps on the keyboard.", memory_type="observation")
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
    memory, _, _ = memory_create(owner=owner, content="Meetings end at five.")
    url = f"{MEMORIES}/{memory.pk}"
    assert owner_client.get(url).json()["id"] == memory.pk

    reinforced = owner_client.post(f"{url}/reinforce")
    assert reinforced.status_code == 200 and reinforced.json()["reinforce_count"] == 1

    assert owner_client.delete(url).status_code == 204
    assert owner_client.get(url).json()["is_deleted"] is True
    assert owner_client.get(SEARCH, {"q": "meetings"}).json() == {"results": []}
    assert_error(owner_client.post(f"{url}/reinforce"), 400, "invalid_operation")

    permanent, _, _ = memory_create(owner=owner, content="Water boils at 100C.", decay_policy=DecayPolicy.PERMANENT)
    assert_error(
        owner_client.post(f"{MEMORIES}/{permanent.pk}/reinforce"), 400, "invalid_operation", CANNOT_REINFORCE_PERMANENT
    )
    for missing in (f"{MEMORIES}/999999", f"{MEMORIES}/abc"):
        assert_error(owner_client.get(missing), 404, "memory_not_found")


def test_status(owner_client: APIClient, owner: User) -> None:
    memory_create(owner=owner, content="One.")
    gone, _, _ = memory_create(owner=owner, content="Two.")
    owner_client.delete(f"{MEMORIES}/{gone.pk}")
    body = owner_client.get("/api/memory/status").json()
    assert body["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert body["dimensions"] == 384
    assert (body["memories"], body["deleted"], body["index_size"]) == (1, 1, 1)


def test_other_user_sees_none_of_it(other_client: APIClient, owner: User) -> None:
    memory, _, _ = memory_create(owner=owner, content="Alice's bank is in Zurich.")
    url = f"{MEMORIES}/{memory.pk}"
    assert_error(other_client.get(url), 404, "memory_not_found")
    assert_error(other_client.delete(url), 404, "memory_not_found")
    assert_error(other_client.post(f"{url}/reinforce"), 404, "memory_not_found")
    assert other_client.get(SEARCH, {"q": "Where does Alice bank?"}).json() == {"results": []}
    assert other_client.get("/api/memory/status").json()["memories"] == 0
    assert not Memory.objects.get(pk=memory.pk).is_deleted


def test_anonymous_is_refused(anon_client: APIClient, owner: User) -> None:
    memory, _, _ = memory_create(owner=owner, content="Secret.")
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
    memory, _, _ = memory_create(owner=owner, content="Alice only.")
    assert client.get("/memory/recall").status_code == 302  # to the login page
    client.force_login(other_user)
    assert b"Alice only." not in client.get("/memory/recall").content
    assert b"Alice only." not in client.get("/memory/recall/results", {"q": "Alice"}).content
    assert client.post(f"/memory/recall/{memory.pk}/delete").status_code == 404
    assert client.post(f"/memory/recall/{memory.pk}/reinforce").status_code == 404


def test_admin_lists_memories_without_the_raw_embedding(admin_client: Client, owner: User) -> None:
    memory, _, _ = memory_create(owner=owner, content="Admin can see this.")
    listing = admin_client.get("/admin/memory/memory/", {"q": "admin"})
    assert listing.status_code == 200 and b"Admin can see this." in listing.content
    change = admin_client.get(f"/admin/memory/memory/{memory.pk}/change/")
    assert change.status_code == 200
    assert b"384 dimensions" in change.content
    assert b'name="embedding"' not in change.content


# The list, edit and pin


def test_list_is_paginated_with_provenance_confidence_fade_and_uses(
    owner_client: APIClient, owner: User, other_user: User, django_assert_num_queries: Any
) -> None:
    now = timezone.now()
    memories = [
        memory_create(owner=owner, content=f"Fact number {n}: {word}.", now=now - timedelta(minutes=n)).memory
        for n, word in enumerate(["apples", "boats", "clouds"])
    ]
    memory_create(owner=other_user, content="Not Alice's.")
    feedback = memory_create(
        owner=owner,
        content="Keep migrations small.",
        source=MemorySource.FEEDBACK,
        source_run_id=12,
        source_note="Split this migration, please.",
        decay_policy=DecayPolicy.PERMANENT,
    ).memory
    memory_uses_record(owner=owner, memory_ids=[feedback.pk, memories[0].pk], run_id=12, agent="coder")
    memory_uses_record(owner=owner, memory_ids=[feedback.pk], run_id=13, agent="reviewer")

    # The token and its last use; the faded clocks, count, page; the uses: counts, latest.
    with django_assert_num_queries(7):
        first = owner_client.get(MEMORIES, {"page_size": 2})
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["count"] == 4 and body["next"] and len(body["results"]) == 2
    top = body["results"][0]
    assert top["id"] == feedback.pk
    assert (top["source"], top["source_run_id"], top["source_note"]) == (
        "feedback",
        12,
        "Split this migration, please.",
    )
    assert top["pinned"] is True and top["fades_at"] is None and top["confidence"] == 1.0
    assert top["use_count"] == 2
    assert [(u["run_id"], u["agent"]) for u in top["latest_uses"]] == [(13, "reviewer"), (12, "coder")]
    second = body["results"][1]
    assert second["id"] == memories[0].pk and second["pinned"] is False and second["use_count"] == 1
    fades_at = datetime.fromisoformat(second["fades_at"])
    assert fades_at == memories[0].last_reinforced_at + timedelta(hours=memories[0].half_life_hours)
    assert 0.99 < second["confidence"] <= 1.0
    rest = owner_client.get(MEMORIES, {"page_size": 2, "page": 2}).json()["results"]
    assert [m["id"] for m in rest] == [memories[1].pk, memories[2].pk]


def test_list_filters(owner_client: APIClient, owner: User, project: Project, other_project: Project) -> None:
    in_project = memory_create(owner=owner, content="Uses Postgres 16.", project=project).memory
    coder = memory_create(owner=owner, content="Prefers small functions.", agent="coder").memory
    finding = memory_create(owner=owner, content="Check for None first.", source=MemorySource.FINDING).memory
    long_ago = timezone.now() - timedelta(days=400)
    faded = memory_create(owner=owner, content="An old postgres quirk.", now=long_ago).memory
    gone = memory_create(owner=owner, content="Deleted postgres note.").memory
    memory_delete(owner=owner, memory_id=gone.pk)

    def ids(**params: object) -> list[int]:
        response = owner_client.get(MEMORIES, params)
        assert response.status_code == 200, response.content
        return [m["id"] for m in response.json()["results"]]

    assert set(ids()) == {in_project.pk, coder.pk, finding.pk}
    assert ids(project=project.pk) == [in_project.pk]
    assert ids(agent="coder") == [coder.pk]
    assert ids(source="finding") == [finding.pk]
    assert ids(q="POSTGRES") == [in_project.pk]
    assert set(ids(q="postgres", include_faded="true")) == {in_project.pk, faded.pk}
    assert_error(owner_client.get(MEMORIES, {"project": other_project.pk}), 404, "not_found")
    assert "source" in field_errors(owner_client.get(MEMORIES, {"source": "rumour"}))
    assert "include_faded" in field_errors(owner_client.get(MEMORIES, {"include_faded": "perhaps"}))


def test_edit_pin_unpin_delete(owner_client: APIClient, owner: User) -> None:
    memory = memory_create(owner=owner, content="Meetings end at five.").memory
    url = f"{MEMORIES}/{memory.pk}"

    edited = owner_client.patch(url, {"content": "Meetings end at half past five."}, format="json")
    assert edited.status_code == 200, edited.content
    assert edited.json()["content"] == "Meetings end at half past five."
    (hit,) = owner_client.get(SEARCH, {"q": "half past five"}).json()["results"]
    assert hit["id"] == memory.pk and hit["content"] == "Meetings end at half past five."
    assert "content" in field_errors(owner_client.patch(url, {"content": "   "}, format="json"))
    assert "content" in field_errors(owner_client.patch(url, {"content": "x" * 10_001}, format="json"))
    assert "content" in field_errors(owner_client.patch(url, {}, format="json"))
    assert Memory.objects.get(pk=memory.pk).content == "Meetings end at half past five."

    pinned = owner_client.post(f"{url}/pin")
    assert pinned.status_code == 200 and pinned.json()["pinned"] is True and pinned.json()["fades_at"] is None
    assert Memory.objects.get(pk=memory.pk).decay_policy == DecayPolicy.PERMANENT
    unpinned = owner_client.post(f"{url}/unpin")
    assert unpinned.json()["pinned"] is False and unpinned.json()["decay_policy"] == "reinforceable"
    assert unpinned.json()["fades_at"] is not None

    assert owner_client.delete(url).status_code == 204
    assert owner_client.get(MEMORIES).json()["count"] == 0
    assert_error(owner_client.patch(url, {"content": "Again."}, format="json"), 400, "invalid_operation")
    assert_error(owner_client.post(f"{url}/pin"), 400, "invalid_operation")


def test_another_users_memory_is_404_everywhere(other_client: APIClient, owner: User) -> None:
    memory = memory_create(owner=owner, content="Alice's secret.").memory
    url = f"{MEMORIES}/{memory.pk}"
    assert other_client.get(MEMORIES).json()["count"] == 0
    assert_error(other_client.patch(url, {"content": "Mine now."}, format="json"), 404, "memory_not_found")
    assert_error(other_client.post(f"{url}/pin"), 404, "memory_not_found")
    assert_error(other_client.post(f"{url}/unpin"), 404, "memory_not_found")
    assert_error(other_client.delete(url), 404, "memory_not_found")
    memory.refresh_from_db()
    assert (memory.content, memory.decay_policy, memory.is_deleted) == ("Alice's secret.", "reinforceable", False)


def test_recall_page_shows_source_uses_and_fade(browser: Client, owner: User) -> None:
    now = timezone.now()
    finding = memory_create(
        owner=owner,
        content="Close every file you open.",
        source=MemorySource.FINDING,
        source_run_id=41,
        source_note="Leaked file handle in loader.py",
        half_life_hours=48,
        now=now,
    ).memory
    memory_uses_record(owner=owner, memory_ids=[finding.pk], run_id=43, agent="coder")
    memory_create(owner=owner, content="Pinned rule.", decay_policy=DecayPolicy.PERMANENT)
    memory_create(owner=owner, content="Said by the agent.", source=MemorySource.AGENT, agent="reviewer")

    page = browser.get("/memory/recall").content.decode()
    assert "Review finding in" in page and '<a href="/memory/runs/41/lineage">' in page
    assert '<span class="recall-note">Leaked file handle in loader.py</span>' in page
    assert "by 1 run" in page and '<a href="/memory/runs/43/lineage">run 43</a> (coder)' in page
    fades = timezone.localtime(now + timedelta(hours=48))
    assert f'Fades out <time datetime="{fades.isoformat()}' in page
    assert "Pinned: never fades" in page and "Agent reviewer" in page and "by no run yet" in page
    assert f'action="/memory/recall/{finding.pk}/pin"' in page and f'href="/memory/recall/{finding.pk}/edit"' in page
    assert "<script>" not in page.split("</head>")[1]  # the CSP allows no inline scripts


def test_recall_page_pin_and_edit(browser: Client, owner: User, other_user: User) -> None:
    memory = memory_create(owner=owner, content="Tabs in Makefiles.").memory
    assert browser.post(f"/memory/recall/{memory.pk}/pin", {"pinned": "1"}).status_code == 302
    assert Memory.objects.get(pk=memory.pk).decay_policy == DecayPolicy.PERMANENT
    assert browser.post(f"/memory/recall/{memory.pk}/pin", {"pinned": "0"}).status_code == 302
    assert Memory.objects.get(pk=memory.pk).decay_policy == DecayPolicy.REINFORCEABLE

    form = browser.get(f"/memory/recall/{memory.pk}/edit")
    assert form.status_code == 200 and b"Tabs in Makefiles." in form.content and b"csrfmiddlewaretoken" in form.content
    saved = browser.post(f"/memory/recall/{memory.pk}/edit", {"content": "Tabs, never spaces, in Makefiles."})
    assert saved.status_code == 302 and saved["Location"] == "/memory/recall"
    assert Memory.objects.get(pk=memory.pk).content == "Tabs, never spaces, in Makefiles."
    assert browser.post(f"/memory/recall/{memory.pk}/edit", {"content": "  "}).status_code == 400
    assert Memory.objects.get(pk=memory.pk).content == "Tabs, never spaces, in Makefiles."

    other = Client()
    other.force_login(other_user)
    assert other.get(f"/memory/recall/{memory.pk}/edit").status_code == 404
    assert other.post(f"/memory/recall/{memory.pk}/edit", {"content": "Mine."}).status_code == 404
    assert other.post(f"/memory/recall/{memory.pk}/pin", {"pinned": "1"}).status_code == 404
    assert Memory.objects.get(pk=memory.pk).decay_policy == DecayPolicy.REINFORCEABLE


def test_admin_shows_source_and_uses(admin_client: Client, owner: User) -> None:
    memory = memory_create(owner=owner, content="From a review.", source=MemorySource.FINDING, source_run_id=9).memory
    memory_uses_record(owner=owner, memory_ids=[memory.pk], run_id=77, agent="planner")
    listing = admin_client.get("/admin/memory/memory/", {"source__exact": "finding"})
    assert listing.status_code == 200 and b"From a review." in listing.content and b"Review finding" in listing.content
    change = admin_client.get(f"/admin/memory/memory/{memory.pk}/change/").content.decode()
    assert 'name="source_run_id" value="9"' in change and "77" in change and "planner" in change
