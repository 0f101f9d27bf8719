"""The session engine (SESSION_ENGINE): Django's database sessions, except that a session
key with a NUL character names no session. A cookie can carry one (``"\\000…"`` is
unquoted to a NUL), PostgreSQL text cannot, and the lookup would fail: a 500 on every page,
endpoint and websocket for whoever sends such a cookie. Such a request is anonymous."""

from __future__ import annotations

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore


class SessionStore(DatabaseSessionStore):
    # Django's hook for which keys may name a session (at least 8 characters);
    # django-stubs does not declare it.
    def _validate_session_key(self, key: str | None) -> bool:
        return bool(key) and "\x00" not in str(key) and super()._validate_session_key(key)  # type: ignore[misc]
