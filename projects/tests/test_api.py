"""REST API: /api/projects and /api/projects/{id}."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from projects.models import Project
from projects.selectors import PROJECT_NOT_FOUND
from projects.services import LAST_PROJECT, NAME_TAKEN
from tasks.models import Task
from tests.api_helpers import assert_error, csrf_headers, field_errors
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

LIST = "/api/projects"


def detail(project_id: object) -> str:
    return f"/api/projects/{project_id}"


# --- list --------------------------------------------------------------------------------


def test_list_shows_own_projects_with_task_counts(
    owner_client: APIClient, project: Project, other_project: Project
) -> None:
    second = ProjectFactory(owner=project.owner, name="Second", description="More")
    TaskFactory.create_batch(2, project=project)
    TaskFactory(project=other_project)
    response = owner_client.get(LIST)
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    assert body["next"] is None
    assert body["previous"] is None
    assert [(p["id"], p["name"], p["task_count"]) for p in body["results"]] == [
        (project.pk, "Alice's project", 2),
        (second.pk, "Second", 0),
    ]
    assert set(body["results"][1]) == {
        "id",
        "name",
        "description",
        "llm_provider",
        "llm_base_url",
        "llm_api_key_saved",
        "llm_model",
        "planner_model",
        "coder_model",
        "reviewer_model",
        "llm_max_tokens",
        "token_budget",
        "instructions",
        "learn_distil",
        "lesson_half_life_hours",
        "runs_at_once",
        "task_spend_ceiling_usd",
        "coder_agent",
        "task_count",
        "created_at",
        "updated_at",
    }
    assert body["results"][1]["description"] == "More"
    assert body["results"][1]["learn_distil"] is True and body["results"][1]["lesson_half_life_hours"] is None


def test_list_is_paginated(owner_client: APIClient, owner: User) -> None:
    ProjectFactory.create_batch(3, owner=owner)
    first = owner_client.get(LIST, {"page_size": 2}).json()
    assert first["count"] == 3
    assert len(first["results"]) == 2
    assert first["next"].endswith("page=2&page_size=2")
    second = owner_client.get(first["next"]).json()
    assert len(second["results"]) == 1
    assert second["previous"] is not None


def test_a_page_past_the_end_is_a_404(owner_client: APIClient, project: Project) -> None:
    assert_error(owner_client.get(LIST, {"page": 9}), 404, "not_found")


def test_list_query_count_does_not_grow(owner_client: APIClient, owner: User, django_assert_num_queries) -> None:
    owner_client.get(LIST)  # the token's first use records it (one write, once a minute)
    for size in (3, 30):
        Project.objects.filter(owner=owner).delete()
        for project in ProjectFactory.create_batch(size, owner=owner):
            TaskFactory.create_batch(2, project=project)
        # token lookup, page count, page rows (task counts are annotated)
        with django_assert_num_queries(3):
            response = owner_client.get(LIST)
        assert response.json()["count"] == size
        assert {p["task_count"] for p in response.json()["results"]} == {2}


# --- create ------------------------------------------------------------------------------


def test_create(owner_client: APIClient, owner: User) -> None:
    response = owner_client.post(LIST, {"name": "  Big   plan ", "description": " Why "}, format="json")
    assert response.status_code == 201, response.content
    project = Project.objects.get(owner=owner)
    assert project.name == "Big plan"
    assert project.description == "Why"
    body = response.json()
    assert body["id"] == project.pk
    assert body["name"] == "Big plan"
    assert body["task_count"] == 0


def test_create_without_description(owner_client: APIClient, owner: User) -> None:
    response = owner_client.post(LIST, {"name": "Only a name"}, format="json")
    assert response.status_code == 201
    assert response.json()["description"] == ""


def test_create_accepts_a_name_of_100_characters(owner_client: APIClient, owner: User) -> None:
    response = owner_client.post(LIST, {"name": "n" * 100}, format="json")
    assert response.status_code == 201
    assert Project.objects.get(owner=owner).name == "n" * 100


def test_create_with_a_taken_name(owner_client: APIClient, project: Project) -> None:
    response = owner_client.post(LIST, {"name": "ALICE'S PROJECT"}, format="json")
    assert field_errors(response) == {"name": [NAME_TAKEN]}
    assert Project.objects.filter(owner=project.owner).count() == 1


def test_another_users_project_name_is_free(owner_client: APIClient, other_project: Project) -> None:
    assert owner_client.post(LIST, {"name": other_project.name}, format="json").status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": None}, "name"),
        ({"name": "n" * 101}, "name"),
        ({"name": 123}, "name"),
        ({"name": ["a"]}, "name"),
        ({"name": {"a": 1}}, "name"),
        ({"name": True}, "name"),
        ({"name": "nul\x00byte"}, "name"),
        ({"name": "ok", "description": "d" * 2001}, "description"),
        ({"name": "ok", "description": 5}, "description"),
        ({"name": "ok", "description": "nul\x00"}, "description"),
    ],
)
def test_create_rejects_invalid_input(owner_client: APIClient, owner: User, body: dict, field: str) -> None:
    response = owner_client.post(LIST, body, format="json")
    assert list(field_errors(response)) == [field]
    assert not Project.objects.filter(owner=owner).exists()


# --- retrieve, update, delete ------------------------------------------------------------


def test_retrieve(owner_client: APIClient, project: Project) -> None:
    TaskFactory(project=project)
    response = owner_client.get(detail(project.pk))
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["name"], body["task_count"]) == (project.pk, project.name, 1)


def test_update(owner_client: APIClient, project: Project) -> None:
    TaskFactory(project=project)
    response = owner_client.patch(detail(project.pk), {"name": " Renamed ", "description": "New"}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["name"], response.json()["task_count"]) == ("Renamed", 1)
    project.refresh_from_db()
    assert (project.name, project.description) == ("Renamed", "New")


def test_update_one_field_leaves_the_other(owner_client: APIClient, project: Project) -> None:
    project.description = "Keep me"
    project.save()
    response = owner_client.patch(detail(project.pk), {"name": "Renamed"}, format="json")
    assert response.status_code == 200
    project.refresh_from_db()
    assert (project.name, project.description) == ("Renamed", "Keep me")


def test_update_to_a_taken_name(owner_client: APIClient, project: Project) -> None:
    ProjectFactory(owner=project.owner, name="Other")
    response = owner_client.patch(detail(project.pk), {"name": "other"}, format="json")
    assert field_errors(response) == {"name": [NAME_TAKEN]}
    project.refresh_from_db()
    assert project.name == "Alice's project"


@pytest.mark.parametrize("body", [{"name": ""}, {"name": 7}, {"name": "n" * 101}, {"description": ["x"]}])
def test_update_rejects_invalid_input(owner_client: APIClient, project: Project, body: dict) -> None:
    response = owner_client.patch(detail(project.pk), body, format="json")
    assert list(field_errors(response)) == list(body)
    project.refresh_from_db()
    assert (project.name, project.description) == ("Alice's project", "")


def test_put_is_not_allowed(owner_client: APIClient, project: Project) -> None:
    assert_error(owner_client.put(detail(project.pk), {"name": "x"}, format="json"), 405, "method_not_allowed")


def test_delete_removes_the_project_and_its_tasks(owner_client: APIClient, project: Project) -> None:
    keep = ProjectFactory(owner=project.owner)
    TaskFactory.create_batch(2, project=project)
    response = owner_client.delete(detail(project.pk))
    assert response.status_code == 204
    assert list(Project.objects.filter(owner=project.owner)) == [keep]
    assert not Task.objects.exists()


def test_the_last_project_cannot_be_deleted(owner_client: APIClient, project: Project) -> None:
    response = owner_client.delete(detail(project.pk))
    assert_error(response, 400, "last_project", LAST_PROJECT)
    assert Project.objects.filter(pk=project.pk).exists()


@pytest.mark.parametrize("project_id", ["abc", "1.5", "-1", "0", "99999999999999999999999999", "%00", "1e3"])
def test_ids_that_name_no_project_are_404(owner_client: APIClient, project: Project, project_id: str) -> None:
    for method in (owner_client.get, owner_client.patch, owner_client.delete):
        assert_error(method(detail(project_id)), 404, "not_found", PROJECT_NOT_FOUND)
    assert Project.objects.filter(pk=project.pk).exists()


def test_trailing_slashes_work(owner_client: APIClient, project: Project) -> None:
    assert owner_client.get(LIST + "/").json()["count"] == 1
    created = owner_client.post(LIST + "/", {"name": "Slashed"}, format="json")
    assert created.status_code == 201
    assert owner_client.get(detail(project.pk) + "/").json()["id"] == project.pk
    assert owner_client.patch(detail(project.pk) + "/", {"name": "Re"}, format="json").json()["name"] == "Re"
    assert owner_client.delete(detail(created.json()["id"]) + "/").status_code == 204


# --- personas ----------------------------------------------------------------------------

Call = Callable[[APIClient, Project], object]

OBJECT_CALLS: dict[str, Call] = {
    "get": lambda client, project: client.get(detail(project.pk)),
    "patch": lambda client, project: client.patch(detail(project.pk), {"name": "Taken over"}, format="json"),
    "delete": lambda client, project: client.delete(detail(project.pk)),
}
ALL_CALLS: dict[str, Call] = {
    "list": lambda client, project: client.get(LIST),
    "create": lambda client, project: client.post(LIST, {"name": "New"}, format="json"),
    **OBJECT_CALLS,
}


@pytest.mark.parametrize("call", ALL_CALLS.values(), ids=ALL_CALLS.keys())
def test_anonymous_is_401_everywhere(anon_client: APIClient, project: Project, call: Call) -> None:
    assert_error(call(anon_client, project), 401, "not_authenticated")
    project.refresh_from_db()
    assert project.name == "Alice's project"
    assert Project.objects.count() == 1


@pytest.mark.parametrize("call", OBJECT_CALLS.values(), ids=OBJECT_CALLS.keys())
def test_another_users_project_is_404(other_client: APIClient, project: Project, call: Call) -> None:
    ProjectFactory(owner=project.owner)  # so that a delete would not be refused as the last one
    body = assert_error(call(other_client, project), 404, "not_found", PROJECT_NOT_FOUND)
    assert body["extra"] == {}
    project.refresh_from_db()
    assert project.name == "Alice's project"


def test_another_users_project_reads_like_a_missing_one(other_client: APIClient, project: Project) -> None:
    missing = other_client.get(detail(project.pk + 1000))
    foreign = other_client.get(detail(project.pk))
    assert (missing.status_code, missing.json()) == (foreign.status_code, foreign.json())


def test_another_user_does_not_see_the_project_in_lists(other_client: APIClient, project: Project) -> None:
    assert other_client.get(LIST).json()["count"] == 0


@pytest.mark.parametrize("call", ALL_CALLS.values(), ids=ALL_CALLS.keys())
def test_owner_works_with_a_token(owner_client: APIClient, project: Project, call: Call) -> None:
    ProjectFactory(owner=project.owner)
    response = call(owner_client, project)
    assert response.status_code in (200, 201, 204), response.content


@pytest.mark.parametrize("call", ALL_CALLS.values(), ids=ALL_CALLS.keys())
def test_owner_works_with_the_session_and_csrf(owner_session_client: APIClient, project: Project, call: Call) -> None:
    ProjectFactory(owner=project.owner)
    owner_session_client.credentials(**csrf_headers(owner_session_client))
    response = call(owner_session_client, project)
    assert response.status_code in (200, 201, 204), response.content


UNSAFE_CALLS = {name: ALL_CALLS[name] for name in ("create", "patch", "delete")}


@pytest.mark.parametrize("call", UNSAFE_CALLS.values(), ids=UNSAFE_CALLS.keys())
def test_session_writes_without_csrf_are_refused(owner_session_client: APIClient, project: Project, call: Call) -> None:
    ProjectFactory(owner=project.owner)
    body = assert_error(call(owner_session_client, project), 403, "permission_denied")
    assert "CSRF" in body["message"]
    project.refresh_from_db()
    assert project.name == "Alice's project"
    assert Project.objects.count() == 2


def test_session_reads_need_no_csrf(owner_session_client: APIClient, project: Project) -> None:
    assert owner_session_client.get(LIST).json()["count"] == 1
    assert owner_session_client.get(detail(project.pk)).json()["id"] == project.pk


def test_agent_settings_override_the_servers_for_new_runs(owner_client, project, settings) -> None:
    from pipelines.runs.services import run_start
    from tests.factories import TaskFactory

    settings.ANTHROPIC_API_KEY = "sk-test"
    response = owner_client.patch(
        detail(project.pk),
        {"llm_model": "claude-haiku-4-5", "llm_max_tokens": 2000, "token_budget": 50_000},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert (response.json()["llm_model"], response.json()["token_budget"]) == ("claude-haiku-4-5", 50_000)
    project.refresh_from_db()
    run = run_start(task=TaskFactory(project=project), user=project.owner)
    assert (run.model, run.max_tokens, run.token_budget) == ("claude-haiku-4-5", 2000, 50_000)


@pytest.mark.parametrize(
    "body",
    [
        {"llm_max_tokens": 0},
        {"llm_max_tokens": "many"},
        {"token_budget": 10},
        {"llm_model": 5},
        {"llm_model": "x" * 101},
        {"instructions": "x" * 20_001},
        {"instructions": 5},
        {"learn_distil": "yes"},
        {"learn_distil": 1},
        {"lesson_half_life_hours": 0},
        {"lesson_half_life_hours": "NaN"},
        {"lesson_half_life_hours": 1e9},
        {"runs_at_once": 0},
        {"runs_at_once": 51},
        {"runs_at_once": "two"},
        {"task_spend_ceiling_usd": -1},
        {"task_spend_ceiling_usd": "-0.01"},
        {"task_spend_ceiling_usd": "1.234"},
        {"task_spend_ceiling_usd": "lots"},
        {"task_spend_ceiling_usd": 10_000_000},
    ],
)
def test_bad_agent_settings_are_400(owner_client, project, body) -> None:
    response = owner_client.patch(detail(project.pk), body, format="json")
    assert response.status_code == 400
    assert set(body) <= set(response.json()["extra"]["fields"])


def test_instructions_round_trip(owner_client, project) -> None:
    text = "Use tabs.\n\nNever touch migrations/."
    response = owner_client.patch(detail(project.pk), {"instructions": text}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["instructions"] == text
    assert owner_client.get(detail(project.pk)).json()["instructions"] == text
    project.refresh_from_db()
    assert project.instructions == text
    created = owner_client.post(LIST, {"name": "With rules", "instructions": "x" * 20_000}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["instructions"] == "x" * 20_000


def test_learning_settings_round_trip(owner_client, project) -> None:
    response = owner_client.patch(
        detail(project.pk), {"learn_distil": False, "lesson_half_life_hours": 72.5}, format="json"
    )
    assert response.status_code == 200, response.content
    assert (response.json()["learn_distil"], response.json()["lesson_half_life_hours"]) == (False, 72.5)
    project.refresh_from_db()
    assert (project.learn_distil, project.lesson_half_life_hours) == (False, 72.5)
    cleared = owner_client.patch(detail(project.pk), {"lesson_half_life_hours": None}, format="json")
    assert cleared.json()["lesson_half_life_hours"] is None
    assert cleared.json()["learn_distil"] is False  # a PATCH leaves what it does not name


def test_runs_at_once_round_trip(owner_client, project) -> None:
    assert owner_client.get(detail(project.pk)).json()["runs_at_once"] is None  # the server's default
    response = owner_client.patch(detail(project.pk), {"runs_at_once": 50}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["runs_at_once"] == 50
    project.refresh_from_db()
    assert project.runs_at_once == 50
    cleared = owner_client.patch(detail(project.pk), {"runs_at_once": None}, format="json")
    assert cleared.json()["runs_at_once"] is None
    created = owner_client.post(LIST, {"name": "One at a time", "runs_at_once": 1}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["runs_at_once"] == 1


def test_task_spend_ceiling_round_trip(owner_client, project) -> None:
    assert owner_client.get(detail(project.pk)).json()["task_spend_ceiling_usd"] is None  # the server's default
    response = owner_client.patch(detail(project.pk), {"task_spend_ceiling_usd": "5.00"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["task_spend_ceiling_usd"] == "5.00"
    project.refresh_from_db()
    assert project.task_spend_ceiling_usd == Decimal("5.00")
    refused = owner_client.patch(detail(project.pk), {"task_spend_ceiling_usd": -2}, format="json")
    assert refused.status_code == 400
    assert "task_spend_ceiling_usd" in refused.json()["extra"]["fields"]
    project.refresh_from_db()
    assert project.task_spend_ceiling_usd == Decimal("5.00")
    none = owner_client.patch(detail(project.pk), {"task_spend_ceiling_usd": 0}, format="json")
    assert none.json()["task_spend_ceiling_usd"] == "0.00"  # no ceiling for this project
