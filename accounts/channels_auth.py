"""Websocket authentication for scripts: ``Authorization: Token <token>`` on the
handshake, for clients that carry no session cookie. Runs after Channels'
AuthMiddlewareStack, so a session login wins."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware

from .services import AuthenticationFailed, api_token_authenticate


class TokenAuthMiddleware(BaseMiddleware):
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            header = dict(scope.get("headers", [])).get(b"authorization", b"").decode("latin-1")
            keyword, _, raw = header.partition(" ")
            if keyword.lower() == "token" and raw.strip():
                try:
                    token = await database_sync_to_async(api_token_authenticate)(raw=raw.strip())
                except AuthenticationFailed:
                    pass  # revoked, expired or made up: the connection stays anonymous
                else:
                    scope = {**scope, "user": token.user}
        return await super().__call__(scope, receive, send)
