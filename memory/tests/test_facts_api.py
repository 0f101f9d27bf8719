"""/api/memory/facts, /goals and /context: personas, validation, one error shape."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from memory.models import Fact, Goal
from memory.services.facts import fact_create, goal_complete, goal_create
from projects.models import Project
from projects.selectors import PROJECT_NOT_FOUND
from tests.api_helpers import assert_error, csrf_headers, field_errors

pytestmark = pytest.mark.django_db

FACTS = "/api/memory/facts"
GOALS = "/api/memory/goals"
CONTEXT = "/api/memory/context"
COMPLETE_MATCHING = "/api/memory/goals/complete"


@pytest.fixture
def fact(owner: User) -> Fact:
    return fact_create(user=owner, content="Likes tea")


@pytest.fixture
def goal(owner: User) -> Goal:
    return goal_create(user=owner, text="Ship v2", deadline="Friday")


def _object_endpoints(fact: Fact, goal: Goal) -> list[tuple[str, str, dict]]:
    return [
        ("patch", f"{FACTS}/{fact.pk}", {"content": "Hijacked"}),
        ("delete", f"{FACTS}/{fact.pk}", {}),
        ("patch", f"{GOALS}/{goal.pk}", {"text": "Hijacked"}),
        ("delete", f"{GOALS}/{goal.pk}", {}),
        ("post", f"{GOALS}/{goal.pk}/complete", {}),
    ]


# --- personas --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", FACTS),
        ("post", FACTS),
        ("patch", f"{FACTS}/1"),
        ("delete", f"{FACTS}/1"),
        ("get", GOALS),
        ("post", GOALS),
        ("patch", f"{GOALS}/1"),
        ("delete", f"{GOALS}/1"),
        ("post", f"{GOALS}/1/complete"),
        ("post", COMPLETE_MATCHING),
        ("get", CONTEXT),
    ],
)
def test_anonymous_gets_401(anon_client: APIClient, method: str, url: str) -> None:
    assert_error(getattr(anon_client, method)(url, {}, format="json"), 401, "not_authenticated")


def test_other_user_gets_404_on_every_object_endpoint(other_client: APIClient, fact: Fact, goal: Goal) -> None:
    for method, url, body in _object_endpoints(fact, goal):
        assert_error(getattr(other_client, method)(url, body, format="json"), 404, "not_found")
    fact.refresh_from_db()
    goal.refresh_from_db()
    assert (fact.content, goal.text, goal.status) == ("Likes tea", "Ship v2", "active")
    assert other_client.get(FACTS).json()["count"] == 0
    assert other_client.get(GOALS).json()["count"] == 0
    assert other_client.get(CONTEXT).json() == {"context": ""}
    assert_error(other_client.post(COMPLETE_MATCHING, {"search_text": "ship"}, format="json"), 404, "not_found")


@pytest.mark.parametrize("bad_id", ["999999", "abc"])
def test_unknown_ids_are_404(owner_client: APIClient, bad_id: str) -> None:
    assert_error(owner_client.patch(f"{FACTS}/{bad_id}", {"content": "x"}, format="json"), 404, "not_found")
    assert_error(owner_client.delete(f"{GOALS}/{bad_id}"), 404, "not_found")


def test_session_writes_need_csrf(owner_session_client: APIClient) -> None:
    assert_error(owner_session_client.post(FACTS, {"content": "x"}, format="json"), 403, "permission_denied")
    response = owner_session_client.post(FACTS, {"content": "x"}, format="json", **csrf_headers(owner_session_client))
    assert response.status_code == 201


# --- facts -----------------------------------------------------------------------------


def test_owner_creates_lists_edits_and_deletes_a_fact(owner_client: APIClient, owner: User, project: Project) -> None:
    response = owner_client.post(FACTS, {"content": "  Deploys with Actions  ", "project": project.pk}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"id", "content", "project", "source", "created_at", "updated_at"}
    assert (body["content"], body["project"], body["source"]) == ("Deploys with Actions", project.pk, "manual")

    listed = owner_client.get(FACTS).json()
    assert set(listed) == {"count", "next", "previous", "results"}
    assert [item["id"] for item in listed["results"]] == [body["id"]]

    response = owner_client.patch(f"{FACTS}/{body['id']}", {"content": "Deploys with Jenkins"}, format="json")
    assert response.status_code == 200
    assert response.json()["content"] == "Deploys with Jenkins"
    assert response.json()["project"] == project.pk  # untouched

    response = owner_client.patch(f"{FACTS}/{body['id']}", {"project": None}, format="json")
    assert response.json()["project"] is None

    assert owner_client.delete(f"{FACTS}/{body['id']}").status_code == 204
    assert not Fact.objects.exists()


def test_fact_list_filters_by_project(owner_client: APIClient, owner: User, project: Project) -> None:
    fact_create(user=owner, content="global")
    fact_create(user=owner, content="here", project=project)
    results = owner_client.get(FACTS, {"project": project.pk}).json()["results"]
    assert [item["content"] for item in results] == ["here"]


def test_list_filter_by_someone_elses_project_is_404(owner_client: APIClient, other_project: Project) -> None:
    assert_error(owner_client.get(FACTS, {"project": other_project.pk}), 404, "not_found")
    assert_error(owner_client.get(GOALS, {"project": other_project.pk}), 404, "not_found")
    assert_error(owner_client.get(CONTEXT, {"project": other_project.pk}), 404, "not_found")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "   \n "}, "content"),
        ({"content": "x" * 2001}, "content"),
        ({"content": 42}, "content"),
        ({"content": True}, "content"),
        ({"content": ["a"]}, "content"),
        ({"content": None}, "content"),
        ({"content": "ok", "project": "first"}, "project"),
        ({"content": "ok", "project": 999999}, "project"),
    ],
)
def test_fact_validation(owner_client: APIClient, body: dict, field: str) -> None:
    assert field in field_errors(owner_client.post(FACTS, body, format="json"))
    assert not Fact.objects.exists()


def test_someone_elses_project_reads_like_a_missing_one(
    owner_client: APIClient, other_project: Project, fact: Fact, goal: Goal
) -> None:
    missing = field_errors(owner_client.post(FACTS, {"content": "x", "project": 999999}, format="json"))
    theirs = field_errors(owner_client.post(FACTS, {"content": "x", "project": other_project.pk}, format="json"))
    assert missing == theirs == {"project": [PROJECT_NOT_FOUND]}
    theirs = field_errors(owner_client.post(GOALS, {"text": "x", "project": other_project.pk}, format="json"))
    assert theirs == {"project": [PROJECT_NOT_FOUND]}
    for url in (f"{FACTS}/{fact.pk}", f"{GOALS}/{goal.pk}"):
        response = owner_client.patch(url, {"project": other_project.pk}, format="json")
        assert field_errors(response) == {"project": [PROJECT_NOT_FOUND]}


def test_fact_edit_validation(owner_client: APIClient, fact: Fact) -> None:
    assert "content" in field_errors(owner_client.patch(f"{FACTS}/{fact.pk}", {"content": " "}, format="json"))
    assert "content" in field_errors(owner_client.patch(f"{FACTS}/{fact.pk}", {"content": 1}, format="json"))
    fact.refresh_from_db()
    assert fact.content == "Likes tea"


def test_malformed_json_is_one_error_shape(owner_client: APIClient) -> None:
    response = owner_client.post(FACTS, "{not json", content_type="application/json")
    assert_error(response, 400, "parse_error")


# --- goals -----------------------------------------------------------------------------


def test_owner_sets_edits_completes_and_deletes_a_goal(owner_client: APIClient) -> None:
    response = owner_client.post(GOALS, {"text": "Ship v2", "deadline": "Friday"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["text"], body["deadline"], body["status"], body["completed_at"]) == (
        "Ship v2",
        "Friday",
        "active",
        None,
    )
    goal_id = body["id"]

    response = owner_client.patch(f"{GOALS}/{goal_id}", {"deadline": ""}, format="json")
    assert response.status_code == 200
    assert (response.json()["text"], response.json()["deadline"]) == ("Ship v2", "")

    response = owner_client.post(f"{GOALS}/{goal_id}/complete")
    assert response.status_code == 200
    assert response.json()["status"] == "completed"
    assert response.json()["completed_at"]

    assert_error(owner_client.post(f"{GOALS}/{goal_id}/complete"), 409, "conflict")
    assert owner_client.delete(f"{GOALS}/{goal_id}").status_code == 204
    assert not Goal.objects.exists()


def test_goal_status_is_not_editable(owner_client: APIClient, goal: Goal) -> None:
    errors = field_errors(owner_client.patch(f"{GOALS}/{goal.pk}", {"status": "completed"}, format="json"))
    assert "status" in errors
    goal.refresh_from_db()
    assert goal.status == "active"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"text": ""}, "text"),
        ({"text": "  "}, "text"),
        ({"text": "x" * 1001}, "text"),
        ({"text": 5}, "text"),
        ({"text": "ok", "deadline": 5}, "deadline"),
        ({"text": "ok", "deadline": "x" * 101}, "deadline"),
    ],
)
def test_goal_validation(owner_client: APIClient, body: dict, field: str) -> None:
    assert field in field_errors(owner_client.post(GOALS, body, format="json"))


def test_goal_list_filters_by_status(owner_client: APIClient, owner: User) -> None:
    active = goal_create(user=owner, text="Active one")
    done = goal_complete(goal=goal_create(user=owner, text="Done one"))
    assert [g["id"] for g in owner_client.get(GOALS, {"status": "active"}).json()["results"]] == [active.pk]
    assert [g["id"] for g in owner_client.get(GOALS, {"status": "completed"}).json()["results"]] == [done.pk]
    assert owner_client.get(GOALS).json()["count"] == 2
    assert "status" in field_errors(owner_client.get(GOALS, {"status": "paused"}))


def test_complete_by_search_text(owner_client: APIClient, owner: User) -> None:
    goal = goal_create(user=owner, text="Ship the CSV Export")
    response = owner_client.post(COMPLETE_MATCHING, {"search_text": "csv export"}, format="json")
    assert response.status_code == 200
    assert (response.json()["id"], response.json()["status"]) == (goal.pk, "completed")
    response = owner_client.post(COMPLETE_MATCHING, {"search_text": "csv export"}, format="json")
    assert_error(response, 404, "not_found", "No matching goal found for: csv export")


@pytest.mark.parametrize("body", [{}, {"search_text": ""}, {"search_text": 3}])
def test_complete_by_search_text_validation(owner_client: APIClient, body: dict) -> None:
    assert "search_text" in field_errors(owner_client.post(COMPLETE_MATCHING, body, format="json"))


# --- context ---------------------------------------------------------------------------


def test_context(owner_client: APIClient, owner: User, project: Project) -> None:
    assert owner_client.get(CONTEXT).json() == {"context": ""}
    fact_create(user=owner, content="global")
    fact_create(user=owner, content="here", project=project)
    other = Project.objects.create(owner=owner, name="Other")
    goal_create(user=owner, text="Elsewhere", project=other)
    assert owner_client.get(CONTEXT, {"project": project.pk}).json() == {
        "context": "[Memory Context]\nFacts: here; global"
    }
    assert "- Elsewhere" in owner_client.get(CONTEXT).json()["context"]


# --- query counts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "make", "params"),
    [(FACTS, "fact", {}), (GOALS, "goal", {}), (FACTS, "fact", {"project": 0}), (GOALS, "goal", {"project": 0})],
)
def test_list_query_count_does_not_grow(
    owner_client: APIClient, owner: User, project: Project, django_assert_num_queries, url: str, make: str, params: dict
) -> None:
    params = {"project": project.pk} if params else {}
    owner_client.get(url)  # the token's first use records it (one write, once a minute)
    # token lookup, [the filtered project], page count, page rows
    expected = 4 if params else 3
    for size in (2, 30):
        Fact.objects.all().delete()
        Goal.objects.all().delete()
        for number in range(size):
            if make == "fact":
                fact_create(user=owner, content=f"f{number}", project=project)
            else:
                goal_create(user=owner, text=f"g{number}", project=project)
        with django_assert_num_queries(expected):
            response = owner_client.get(url, params)
        assert response.json()["count"] == size
