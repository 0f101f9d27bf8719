"""The OpenAPI schema is valid, warning-free and complete; the docs page works offline."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

EXPECTED_OPERATIONS = {
    "/api/auth/register": {"post"},
    "/api/auth/login": {"post"},
    "/api/auth/logout": {"post"},
    "/api/auth/token": {"post"},
    "/api/auth/me": {"get"},
    "/api/auth/password": {"post"},
    "/api/auth/tokens": {"get"},
    "/api/auth/tokens/{token_id}": {"delete"},
    "/api/projects": {"get", "post"},
    "/api/projects/{project_id}": {"get", "patch", "delete"},
    "/api/tasks": {"get", "post"},
    "/api/tasks/{task_id}": {"get", "patch", "delete"},
    "/api/tasks/{task_id}/status": {"patch"},
}
ANONYMOUS_OPERATIONS = {("/api/auth/register", "post"), ("/api/auth/login", "post"), ("/api/auth/token", "post")}


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory, django_db_blocker) -> dict:
    path = tmp_path_factory.mktemp("schema") / "openapi.yaml"
    with django_db_blocker.unblock():
        # --fail-on-warn turns every drf-spectacular warning (an endpoint it could not
        # describe) into an error; --validate checks the result against OpenAPI 3.
        call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(Path(path).read_text())


def test_schema_is_openapi_3_with_every_endpoint(schema: dict) -> None:
    assert schema["openapi"].startswith("3.")
    operations = {path: set(item) - {"parameters"} for path, item in schema["paths"].items()}
    # Other apps add endpoints of their own; these are the accounts, projects and tasks ones.
    assert {path: operations.get(path) for path in EXPECTED_OPERATIONS} == EXPECTED_OPERATIONS


def test_every_operation_documents_its_errors_with_the_error_body(schema: dict) -> None:
    for path in EXPECTED_OPERATIONS:
        for method, operation in schema["paths"][path].items():
            codes = {int(code) for code in operation["responses"]}
            assert any(200 <= code < 300 for code in codes), (path, method)
            errors = {code for code in codes if code >= 400}
            assert errors, (path, method)
            if (path, method) not in ANONYMOUS_OPERATIONS:
                assert 401 in errors, (path, method)
            if "{" in path:
                assert 404 in errors, (path, method)
            for code in errors:
                content = operation["responses"][str(code)]["content"]["application/json"]
                assert content["schema"] == {"$ref": "#/components/schemas/Error"}, (path, method, code)
    error = schema["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"message", "code", "extra"}


def test_security_matches_the_views(schema: dict) -> None:
    assert set(schema["components"]["securitySchemes"]) == {"tokenAuth", "cookieAuth"}
    assert schema["components"]["securitySchemes"]["tokenAuth"]["name"] == "Authorization"
    for path in EXPECTED_OPERATIONS:
        for method, operation in schema["paths"][path].items():
            if (path, method) in ANONYMOUS_OPERATIONS:
                assert operation["security"] == [{}]
            else:
                assert {"tokenAuth": []} in operation["security"]
                assert {"cookieAuth": []} in operation["security"]


def test_request_bodies_describe_the_rules(schema: dict) -> None:
    components = schema["components"]["schemas"]
    register = components["RegisterRequest"]
    assert register["required"] == ["email", "password"]
    assert (register["properties"]["password"]["minLength"], register["properties"]["password"]["maxLength"]) == (
        8,
        128,
    )
    task_create = components["TaskCreateRequest"]
    assert task_create["required"] == ["title"]
    assert task_create["properties"]["title"]["maxLength"] == 200
    assert task_create["properties"]["description"]["maxLength"] == 50_000
    # A move always names its column, even though the method is PATCH.
    move = schema["paths"]["/api/tasks/{task_id}/status"]["patch"]["requestBody"]
    assert move["required"] is True
    assert components["TaskMoveRequest"]["required"] == ["status"]
    assert set(components["PatchedTaskUpdateRequest"]["properties"]) == {
        "title",
        "description",
        "category",
        "priority",
        "coder_agent",
    }
    task = components["Task"]
    for read_only in ("status", "position", "subtasks", "pipeline_state", "project"):
        assert task["properties"][read_only]["readOnly"] is True


def test_list_endpoints_are_paginated_and_filtered(schema: dict) -> None:
    tasks = schema["paths"]["/api/tasks"]["get"]
    assert tasks["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PaginatedTaskList"
    }
    assert {p["name"] for p in tasks["parameters"]} == {"page", "page_size", "project", "status", "category", "q"}
    projects = schema["paths"]["/api/projects"]["get"]
    assert {p["name"] for p in projects["parameters"]} == {"page", "page_size"}
    assert set(schema["components"]["schemas"]["PaginatedProjectList"]["properties"]) == {
        "count",
        "next",
        "previous",
        "results",
    }


def test_the_schema_is_served(anon_client: APIClient) -> None:
    response = anon_client.get("/api/schema", {"format": "json"})
    assert response.status_code == 200
    assert set(EXPECTED_OPERATIONS) <= set(response.json()["paths"])


def test_the_docs_page_works_offline(anon_client: APIClient) -> None:
    response = anon_client.get("/api/docs")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "swagger-ui" in html
    assert not re.search(r"cdn|jsdelivr|unpkg|cloudflare|googleapis", html, re.IGNORECASE)
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    assert urls
    for url in urls:
        parsed = urlparse(url)
        assert not parsed.scheme and not parsed.netloc, url  # same origin only
    # The assets it names ship with the app (drf-spectacular-sidecar).
    assets = [url.removeprefix("/" + settings.STATIC_URL.lstrip("/")) for url in urls if "/static/" in url]
    assert len(assets) >= 3
    for asset in assets:
        assert finders.find(asset), asset
