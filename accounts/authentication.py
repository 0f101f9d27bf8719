from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from .services import AuthenticationFailed, api_token_authenticate


class TokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Token <token>``; tokens are looked up by their SHA-256 digest.

    ``request.auth`` is the ApiToken, so that a view can tell which token is in use."""

    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: expected 'Token <token>'.")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        try:
            token = api_token_authenticate(raw=raw)
        except AuthenticationFailed as exc:
            # An expired token says so (code token_expired), a revoked one does not.
            raise exceptions.AuthenticationFailed(exc.message, code=exc.code) from None
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
