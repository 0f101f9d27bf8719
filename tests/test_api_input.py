"""Bad bodies on every API endpoint that takes one: always a 400 (or 415), never a 500,
always the one error shape, and nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from accounts.models import ApiToken, User
from core.parsers import BODY_TOO_DEEP
from projects.models import Project
from tasks.models import Task, TaskStatusChange
from tests.api_helpers import assert_error
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

Endpoint = Callable[[Task], tuple[str, str]]

# method, path: every endpoint that reads a request body.
ENDPOINTS: dict[str, Endpoint] = {
    "register": lambda task: ("post", "/api/auth/register"),
    "login": lambda task: ("post", "/api/auth/login"),
    "token": lambda task: ("post", "/api/auth/token"),
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
