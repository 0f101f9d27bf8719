from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from .services import api_token_authenticate


class TokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Token <token>``; tokens are looked up by their SHA-256 digest."""

    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[Any, None] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: expected 'Token <token>'.")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        user = api_token_authenticate(raw=raw)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return user, None

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
