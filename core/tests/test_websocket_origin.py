"""The websocket Origin check (core.websocket_origin, in config/asgi.py): a socket opens
only from the server's own origin — the Host's host and port, whatever the scheme — or
one listed in CSRF_TRUSTED_ORIGINS. Through the real ASGI application, with a session
cookie, as a browser on another page would send it."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from accounts.models import User
from config.asgi import application
from core.websocket_origin import websocket_origin_allowed
from projects.models import Project

pytestmark = pytest.mark.django_db(transaction=True)


def _cookie(user: User) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode())


def _opens(path: str, headers: list[tuple[bytes, bytes]]) -> bool:
    async def connect() -> bool:
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await communicator.connect(timeout=3)
        if connected:
            await communicator.disconnect()
        return connected

    return async_to_sync(connect)()


def _headers(origin: str | None, host: str | None, cookie: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    headers = [cookie]
    if origin is not None:
        headers.append((b"origin", origin.encode("latin1")))
    if host is not None:
        headers.append((b"host", host.encode("latin1")))
    return headers


def test_only_the_servers_own_origin_opens_a_socket_with_the_session(owner: User, project: Project) -> None:
    cookie = _cookie(owner)
    board = f"/ws/projects/{project.pk}"
    assert _opens(board, _headers("http://localhost:8000", "localhost:8000", cookie))
    # The finding: another port of the same host, with the user's cookie.
    assert not _opens(board, _headers("http://localhost:9999", "localhost:8000", cookie))
    assert not _opens(board, _headers("http://127.0.0.1:9999", "127.0.0.1:8000", cookie))
    # Another site; no Origin; no Host; a host this server does not serve.
    assert not _opens(board, _headers("https://evil.example", "localhost:8000", cookie))
    assert not _opens(board, _headers(None, "localhost:8000", cookie))
    assert not _opens(board, _headers("http://localhost:8000", None, cookie))
    assert not _opens(board, _headers("http://evil.example:8000", "evil.example:8000", cookie))
    # Every socket path is behind the same check (the chat's, a task's).
    assert not _opens("/ws/chat", _headers("http://localhost:9999", "localhost:8000", cookie))
    assert _opens("/ws/chat", _headers("http://localhost:8000", "localhost:8000", cookie))


def test_a_trusted_origin_opens_one(owner: User, project: Project, settings) -> None:  # type: ignore[no-untyped-def]
    cookie = _cookie(owner)
    board = f"/ws/projects/{project.pk}"
    settings.CSRF_TRUSTED_ORIGINS = ["http://localhost:9999", "https://*.example.com"]
    assert _opens(board, _headers("http://localhost:9999", "localhost:8000", cookie))
    assert _opens(board, _headers("https://ui.example.com", "localhost:8000", cookie))
    assert not _opens(board, _headers("http://ui.example.com", "localhost:8000", cookie))  # scheme as listed
    assert not _opens(board, _headers("http://localhost:9998", "localhost:8000", cookie))


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        ("http://localhost:8000", "localhost:8000", True),
        ("https://localhost:8000", "localhost:8000", True),  # TLS ended by a proxy: scheme-insensitive
        ("HTTP://LOCALHOST:8000", "LocalHost:8000", True),
        ("http://127.0.0.1", "127.0.0.1", True),
        ("http://127.0.0.1:80", "127.0.0.1", True),
        ("https://127.0.0.1", "127.0.0.1:443", True),
        ("http://[::1]:8000", "[::1]:8000", True),
        ("http://localhost:8001", "localhost:8000", False),
        ("http://localhost", "localhost:8000", False),
        ("http://localhost:8000", "localhost", False),
        ("https://127.0.0.1", "127.0.0.1:80", False),
        ("http://[::1]:8001", "[::1]:8000", False),
        ("http://127.0.0.1:8000", "localhost:8000", False),
        ("null", "localhost:8000", False),
        ("", "localhost:8000", False),
        ("http://localhost:8000", "", False),
        ("ws://localhost:8000", "localhost:8000", False),
        ("file://localhost:8000", "localhost:8000", False),
        ("http://[::1", "[::1]:8000", False),
        ("http://localhost:99999", "localhost:99999", False),
        ("http://localhost:0", "localhost:0", False),
        ("http://user@localhost:8000", "localhost:8000", False),
        ("http://localhost:8000", "[::1:8000", False),
        ("http://é:8000", "é:8000", False),
        ("http://localhost:8000/path", "localhost:8000", False),
    ],
)
def test_websocket_origin_allowed(origin: str, host: str, allowed: bool) -> None:
    assert websocket_origin_allowed(origin=origin, host=host) is allowed
