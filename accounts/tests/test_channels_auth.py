"""Websocket token authentication: a token that the API refuses is no login here either."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from accounts.channels_auth import TokenAuthMiddleware
from accounts.models import ApiToken, User
from accounts.services import api_token_create, api_token_revoke

pytestmark = pytest.mark.django_db(transaction=True)


def scope_user(raw: str) -> Any:
    seen: dict[str, Any] = {}

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen["user"] = scope["user"]

    middleware = TokenAuthMiddleware(inner)
    scope = {"type": "websocket", "user": AnonymousUser(), "headers": [(b"authorization", f"Token {raw}".encode())]}
    async_to_sync(middleware)(scope, None, None)
    return seen["user"]


def test_a_valid_token_logs_the_socket_in(owner: User) -> None:
    _, raw = api_token_create(user=owner)
    assert scope_user(raw) == owner


def test_a_revoked_or_expired_token_leaves_the_socket_anonymous(owner: User, settings) -> None:
    revoked, revoked_raw = api_token_create(user=owner, name="revoked")
    api_token_revoke(token=revoked)
    assert not scope_user(revoked_raw).is_authenticated

    settings.API_TOKEN_TTL_DAYS = 1
    old, old_raw = api_token_create(user=owner, name="old")
    ApiToken.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    assert not scope_user(old_raw).is_authenticated
