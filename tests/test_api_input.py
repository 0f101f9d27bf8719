"""Bad bodies on every API endpoint that takes one: always a 400 (or 415), never a 500,
always the one error shape, and nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from accounts.models import ApiToken, User
from core.parsers import BODY_TOO_DEEP
from projects.models import Project
from tasks.models import Task, TaskStatusChange
from tests.api_helpers import assert_error, db_snapshot, field_errors
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

Endpoint = Callable[[Task], tuple[str, str]]

# method, path: every endpoint that reads a request body.
ENDPOINTS: dict[str, Endpoint] = {
    "register": lambda task: ("post", "/api/auth/register"),
    "login": lambda task: ("post", "/api/auth/login"),
    "token": lambda task: ("post", "/api/auth/token"),
    "password-change": lambda task: ("post", "/api/auth/password"),
    "project-create": lambda task: ("post", "/api/projects"),
    "project-update": lambda task: ("patch", f"/api/projects/{task.project_id}"),
    "task-create": lambda task: ("post", "/api/tasks"),
    "task-update": lambda task: ("patch", f"/api/tasks/{task.pk}"),
    "task-move": lambda task: ("patch", f"/api/tasks/{task.pk}/status"),
}


@pytest.fixture
def task(project: Project) -> Task:
    return TaskFactory(project=project, title="Original")


def snapshot() -> tuple:
    return (
        User.objects.count(),
        ApiToken.objects.count(),
        list(Project.objects.values_list("name", "description")),
        list(Task.objects.values_list("title", "status", "position", "description")),
        TaskStatusChange.objects.count(),
    )


def send(client: APIClient, endpoint: Endpoint, task: Task, body: bytes, content_type: str = "application/json"):
    method, path = endpoint(task)
    return getattr(client, method)(path, data=body, content_type=content_type)


BAD_JSON = [
    b'{"title": ',
    b"{'title': 'single quotes'}",
    b'{"title": "T",}',
    b'{"title": "\xff\xfe"}',  # not UTF-8
    b'{"title": "a\x00b"}',  # raw control character inside a string
    b'{"title": "T", "position": NaN}',
    b'{"title": "T", "position": Infinity}',
    b"\x00",
]


@pytest.mark.parametrize("endpoint", ENDPOINTS.values(), ids=ENDPOINTS.keys())
@pytest.mark.parametrize("body", BAD_JSON)
def test_malformed_json_is_a_400(owner_client: APIClient, task: Task, endpoint: Endpoint, body: bytes) -> None:
    before = snapshot()
    body_json = assert_error(send(owner_client, endpoint, task, body), 400, "parse_error")
    assert body_json["message"].startswith("JSON parse error")
    assert snapshot() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS.values(), ids=ENDPOINTS.keys())
@pytest.mark.parametrize("body", [b"[]", b'"text"', b"5", b"true", b"null", b'[{"title": "T"}]'])
def test_a_body_that_is_not_an_object_is_a_400(
    owner_client: APIClient, task: Task, endpoint: Endpoint, body: bytes
) -> None:
    before = snapshot()
    assert_error(send(owner_client, endpoint, task, body), 400, "invalid")
    assert snapshot() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS.values(), ids=ENDPOINTS.keys())
def test_a_body_over_the_limit_is_a_400(owner_client: APIClient, task: Task, endpoint: Endpoint) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert limit == 2 * 1024 * 1024
    # Valid apart from its size: the padding is an unknown key that would be ignored.
    body = (
        b'{"email": "x@example.com", "password": "long enough", "name": "N", "title": "T", "status": "spec", "pad": "'
    )
    body += b"x" * (limit + 1 - len(body) - 2) + b'"}'
    assert len(body) == limit + 1
    before = snapshot()
    body_json = assert_error(send(owner_client, endpoint, task, body), 400, "parse_error")
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in body_json["message"]
    assert snapshot() == before


def test_a_body_at_the_limit_is_accepted(owner_client: APIClient, task: Task) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = b'{"title": "At the limit", "pad": "'
    body += b"x" * (limit - len(body) - 2) + b'"}'
    assert len(body) == limit
    response = send(owner_client, ENDPOINTS["task-create"], task, body)
    assert response.status_code == 201, response.content
    assert Task.objects.filter(title="At the limit").exists()


@pytest.mark.parametrize("endpoint", ENDPOINTS.values(), ids=ENDPOINTS.keys())
def test_deeply_nested_json_is_a_400(owner_client: APIClient, task: Task, endpoint: Endpoint) -> None:
    depth = 200_000
    body = b'{"title": ' + b"[" * depth + b"]" * depth + b"}"
    before = snapshot()
    body_json = assert_error(send(owner_client, endpoint, task, body), 400, "parse_error")
    assert body_json["message"] == BODY_TOO_DEEP
    assert snapshot() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS.values(), ids=ENDPOINTS.keys())
def test_a_form_body_is_refused(owner_client: APIClient, task: Task, endpoint: Endpoint) -> None:
    before = snapshot()
    response = send(owner_client, endpoint, task, b"title=T", content_type="application/x-www-form-urlencoded")
    assert_error(response, 415, "unsupported_media_type")
    assert snapshot() == before


# Each field that takes text, with a body that is otherwise valid for its endpoint.
TEXT_FIELDS: list[tuple[str, str, dict]] = [
    ("register", "email", {"password": "long enough"}),
    ("register", "password", {"email": "new@example.com"}),
    ("register", "display_name", {"email": "new@example.com", "password": "long enough"}),
    ("login", "email", {"password": "long enough"}),
    ("login", "password", {"email": "alice@example.com"}),
    ("token", "name", {"email": "alice@example.com", "password": "correct horse battery"}),
    ("project-create", "name", {}),
    ("project-create", "description", {"name": "P2"}),
    ("project-update", "name", {}),
    ("project-update", "description", {}),
    ("task-create", "title", {}),
    ("task-create", "description", {"title": "T"}),
    ("task-update", "title", {}),
    ("task-update", "description", {}),
]
BAD_TEXT = {
    "nul": "a\x00b",
    "lone-surrogate": "a\ud800b",
    "number": 123,
    "float": 1.5,
    "bool": False,
    "list": ["a"],
    "object": {"a": "b"},
    "huge": "x" * 60_000,
}


@pytest.mark.parametrize(("endpoint_name", "field", "rest"), TEXT_FIELDS)
@pytest.mark.parametrize("value", BAD_TEXT.values(), ids=BAD_TEXT.keys())
def test_bad_text_is_a_field_error(
    owner_client: APIClient, task: Task, endpoint_name: str, field: str, rest: dict, value: object
) -> None:
    before = snapshot()
    # json.dumps escapes a lone surrogate as \\ud800, as a client would have to.
    response = send(owner_client, ENDPOINTS[endpoint_name], task, json.dumps({**rest, field: value}).encode())
    body = assert_error(response, 400, "invalid")
    assert list(body["extra"]["fields"]) == [field]
    assert snapshot() == before


def test_unicode_text_is_kept(owner_client: APIClient, project: Project) -> None:
    title = "Ünïcode 🚀 日本語 \u200b"
    response = owner_client.post("/api/tasks", {"title": title}, format="json")
    assert response.status_code == 201
    assert Task.objects.get(pk=response.json()["id"]).title == title.strip()


# --- text that cannot be stored or sent back, ids past the database's range ----------------

LONE_SURROGATE = "\ud800"
ID_PAST_MAX = 2**63  # one past the largest signed 64-bit id
ID_PAST_MIN = -(2**63) - 1
BAD_IDS = [ID_PAST_MAX, ID_PAST_MIN, 10**30]

# Every choice field of the API, with the rest of a body that is valid for its endpoint: the
# error message of a choice field echoes the value it refuses.
CHOICE_FIELDS: list[tuple[str, str, dict, str]] = [
    ("post", "/api/tasks", {"title": "T"}, "category"),
    ("post", "/api/tasks", {"title": "T"}, "priority"),
    ("patch", "/api/tasks/{task}", {}, "category"),
    ("patch", "/api/tasks/{task}", {}, "priority"),
    ("patch", "/api/tasks/{task}/status", {}, "status"),
    ("post", "/api/memory/memories", {"content": "Remember this."}, "decay_policy"),
    ("post", "/api/memory/contexts", {"type": "plan", "content": {"a": 1}}, "compression"),
    ("put", "/api/projects/{project}/repository", {"path": "app"}, "merge_strategy"),
    ("post", "/api/projects/{project}/repository/clone", {"url": "https://example.com/app.git"}, "merge_strategy"),
    ("get", "/api/memory/goals", {}, "status"),
]


@pytest.mark.parametrize(("method", "path", "rest", "field"), CHOICE_FIELDS)
@pytest.mark.parametrize("value", [LONE_SURROGATE, "a\x00b", "x\udfff\ud800y"], ids=["surrogate", "nul", "pair"])
def test_unstorable_text_in_a_choice_field_is_a_field_error(
    owner_client: APIClient, task: Task, method: str, path: str, rest: dict, field: str, value: str
) -> None:
    url = path.format(task=task.pk, project=task.project_id)
    before = db_snapshot()
    if method == "get":
        # A query string carries the surrogate's UTF-8-style bytes, which are decoded with
        # replacement characters.
        response = owner_client.get(f"{url}?{field}={quote(value.encode('utf-8', 'surrogatepass'))}")
    else:
        body = json.dumps({**rest, field: value}).encode()
        response = getattr(owner_client, method)(url, data=body, content_type="application/json")
    assert list(field_errors(response)) == [field]
    assert db_snapshot() == before


@pytest.mark.parametrize(
    "body",
    [
        {"title": "T", "description": "fine", "unknown": [1, {"deep": LONE_SURROGATE}]},
        {"title": "T", "unknown": {"k\x00": "v"}},
        {"title": "T", LONE_SURROGATE: "an unknown key"},
        {"title": "T", "x\x00": "an unknown key"},
    ],
    ids=["nested-surrogate", "nested-nul-key", "surrogate-key", "nul-key"],
)
def test_unstorable_text_anywhere_in_a_body_is_refused_before_any_write(
    owner_client: APIClient, task: Task, body: dict
) -> None:
    before = db_snapshot()
    response = owner_client.post("/api/tasks", data=json.dumps(body).encode(), content_type="application/json")
    fields = field_errors(response)
    assert list(fields) == (["unknown"] if "unknown" in body else ["non_field_errors"])
    assert db_snapshot() == before


def test_text_that_only_looks_odd_is_kept(owner_client: APIClient, project: Project) -> None:
    # A surrogate pair is one astral character; an escaped backslash-u is plain text.
    title = "emoji \U0001f680 and a literal \\ud800"
    body = json.dumps({"title": title}).encode()
    response = owner_client.post("/api/tasks", data=body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert Task.objects.get(pk=response.json()["id"]).title == title


# Path keys that are text, not numbers: a NUL (PostgreSQL text cannot hold one) names nothing.
TEXT_KEY_PATHS = [
    ("get", "/api/memory/contexts/{key}"),
    ("get", "/api/memory/contexts/{key}/lineage"),
    ("post", "/api/memory/contexts/{key}/touch"),
    ("get", "/api/memory/agents/{key}/notes"),
    ("post", "/api/memory/agents/{key}/notes"),
    ("post", "/api/memory/agents/{key}/promote"),
    ("get", "/api/memory/agents/{key}/daily/2026-01-01"),
    ("get", "/api/memory/agents/coder/daily/{key}"),
]


@pytest.mark.parametrize(("method", "path"), TEXT_KEY_PATHS)
@pytest.mark.parametrize("key", ["%00", "ctx_%00", "a%00%01b"])
def test_a_nul_in_a_path_key_is_a_404(owner_client: APIClient, task: Task, method: str, path: str, key: str) -> None:
    before = db_snapshot()
    response = getattr(owner_client, method)(path.format(key=key), {"text": "x"}, format="json")
    assert_error(response, 404, "not_found")
    assert db_snapshot() == before


ID_PATHS = [
    ("get", "/api/projects/{id}"),
    ("patch", "/api/projects/{id}"),
    ("delete", "/api/projects/{id}"),
    ("get", "/api/projects/{id}/repository"),
    ("put", "/api/projects/{id}/repository"),
    ("patch", "/api/projects/{id}/repository"),
    ("delete", "/api/projects/{id}/repository"),
    ("post", "/api/projects/{id}/repository/clone"),
    ("get", "/api/tasks/{id}"),
    ("patch", "/api/tasks/{id}"),
    ("delete", "/api/tasks/{id}"),
    ("patch", "/api/tasks/{id}/status"),
    ("post", "/api/tasks/{id}/start-pipeline"),
    ("get", "/api/tasks/{id}/runs"),
    ("get", "/api/tasks/{id}/events?follow=false"),
    ("get", "/api/runs/{id}"),
    ("get", "/api/runs/{id}/diff"),
    ("get", "/api/runs/{id}/patch"),
    ("post", "/api/runs/{id}/cancel"),
    ("post", "/api/runs/{id}/retry"),
    ("post", "/api/runs/{id}/approve"),
    ("post", "/api/runs/{id}/request-changes"),
    ("post", "/api/runs/{id}/discard-branch"),
    ("patch", "/api/memory/facts/{id}"),
    ("delete", "/api/memory/facts/{id}"),
    ("patch", "/api/memory/goals/{id}"),
    ("delete", "/api/memory/goals/{id}"),
    ("post", "/api/memory/goals/{id}/complete"),
    ("get", "/api/memory/memories/{id}"),
    ("delete", "/api/memory/memories/{id}"),
    ("post", "/api/memory/memories/{id}/reinforce"),
]


@pytest.mark.parametrize(("method", "path"), ID_PATHS)
def test_ids_past_the_64_bit_range_in_a_path_are_a_404(
    owner_client: APIClient, task: Task, method: str, path: str
) -> None:
    before = db_snapshot()
    for bad_id in BAD_IDS:
        response = getattr(owner_client, method)(path.format(id=bad_id), {}, format="json")
        assert response.status_code == 404, response.content  # memories say memory_not_found
        assert set(response.json()) == {"message", "code", "extra"}
    assert db_snapshot() == before


ID_QUERIES = [
    "/api/tasks?project={id}",
    "/api/memory/facts?project={id}",
    "/api/memory/goals?project={id}",
    "/api/memory/context?project={id}",
    "/api/memory/contexts?run={id}",
    "/api/chat/messages?project={id}",
    "/api/chat/session?project={id}",
    "/api/tasks/{task}/events?follow=false&last_event_id={id}",
]


@pytest.mark.parametrize("path", ID_QUERIES)
def test_ids_past_the_64_bit_range_in_a_query_are_refused(owner_client: APIClient, task: Task, path: str) -> None:
    for bad_id in BAD_IDS:
        response = owner_client.get(path.format(id=bad_id, task=task.pk))
        if "last_event_id" in path:
            assert response.status_code == 200  # a position past every event: nothing to replay
        else:
            assert response.status_code in (400, 404), response.content
            assert set(response.json()) == {"message", "code", "extra"}


def test_an_id_past_the_range_finds_no_memories(owner_client: APIClient, task: Task) -> None:
    for bad_id in BAD_IDS:
        response = owner_client.get("/api/memory/memories/search", {"q": "x", "project": bad_id})
        assert response.status_code in (200, 400, 404), response.content
        assert response.status_code != 200 or response.json()["results"] == []


ID_BODIES: list[tuple[str, str, dict]] = [
    ("post", "/api/tasks", {"title": "T"}),
    ("post", "/api/memory/memories", {"content": "Remember this."}),
    ("post", "/api/memory/facts", {"content": "A fact."}),
    ("post", "/api/memory/goals", {"text": "A goal."}),
    ("post", "/api/memory/goals/complete", {"search_text": "goal"}),
    ("post", "/api/chat/messages", {"text": "Hello"}),
]


@pytest.mark.parametrize(("method", "path", "rest"), ID_BODIES)
def test_ids_past_the_64_bit_range_in_a_body_are_refused(
    owner_client: APIClient, task: Task, method: str, path: str, rest: dict
) -> None:
    before = db_snapshot()
    for bad_id in BAD_IDS:
        body = json.dumps({**rest, "project": bad_id}).encode()
        response = getattr(owner_client, method)(path, data=body, content_type="application/json")
        assert response.status_code in (400, 404), response.content
        assert set(response.json()) == {"message", "code", "extra"}
    assert db_snapshot() == before
