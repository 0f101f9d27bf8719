"""Assertions and request helpers shared by the API tests."""

from __future__ import annotations

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
