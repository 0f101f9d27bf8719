"""Assertions and request helpers shared by the API tests."""

from __future__ import annotations

import functools

from django.conf import settings
from django.utils.crypto import get_random_string
from rest_framework.test import APIClient


def csrf_headers(client: APIClient) -> dict[str, str]:
    """Give a session client a CSRF cookie and return the header that must echo it."""
    token = get_random_string(32)
    client.cookies[settings.CSRF_COOKIE_NAME] = token
    return {"HTTP_X_CSRFTOKEN": token}


def assert_error(response, status: int, code: str, message: str | None = None) -> dict:
    """The one error shape, with this status and code (and message, if given)."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"message", "code", "extra"}
    assert body["code"] == code
    if message is not None:
        assert body["message"] == message
    return body


def field_errors(response) -> dict:
    return assert_error(response, 400, "invalid")["extra"]["fields"]


@functools.cache
def _snapshot_queries() -> list[tuple[str, str]]:
    from django.apps import apps
    from django.db import connection, models

    kept = (models.CharField, models.TextField, models.JSONField, models.ForeignKey)
    quote = connection.ops.quote_name
    queries = []
    for config in apps.get_app_configs():
        if not config.path.startswith(str(settings.BASE_DIR)) or "/.venv/" in config.path:
            continue
        for model in config.get_models():
            fields = [model._meta.pk, *(f for f in model._meta.concrete_fields if isinstance(f, kept))]
            columns = ", ".join(quote(field.column) for field in fields)
            queries.append((model._meta.label, f"SELECT {columns} FROM {quote(model._meta.db_table)} ORDER BY 1"))
    return queries


def db_snapshot() -> dict[str, list[tuple]]:
    """What a refused request must leave as it was: every row of every table of the
    project's own apps, by its text and its links (fields that reads update, such as access
    counters and timestamps, are left out). Plain SQL: the fuzz tests take one per request."""
    from django.db import connection

    with connection.cursor() as cursor:
        snapshot = {}
        for label, sql in _snapshot_queries():
            cursor.execute(sql)
            snapshot[label] = cursor.fetchall()
    return snapshot
