"""Which pages may open a websocket: the same origin as the server, or one the operator
trusts (``CSRF_TRUSTED_ORIGINS``), as for a form post.

A browser sends the session cookie with a websocket handshake whatever page opens it,
so the Origin is all that tells our page from another site's. Channels'
``AllowedHostsOriginValidator`` compares the Origin's host with ``ALLOWED_HOSTS`` and
ignores its port: a page served by anything else on the same host (``localhost:9999``)
could open a socket as the logged-in user. Here the Origin's host and port must be the
request's ``Host`` (the scheme may differ: TLS is often ended by a proxy in front), and
that host must be one Django serves (``ALLOWED_HOSTS``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_parts(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a serialised origin, or None when it is not one."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:  # a bracket left open, a port that is not one …
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or port == 0:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host: with DEBUG and no ALLOWED_HOSTS, the local names.
    if settings.ALLOWED_HOSTS:
        return list(settings.ALLOWED_HOSTS)
    return [".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else []


def _trusted(origin: str, scheme: str) -> bool:
    """Listed in CSRF_TRUSTED_ORIGINS, as Django's CSRF check reads it (exact, or
    ``scheme://*.domain`` for its subdomains)."""
    normalised = origin.lower().rstrip("/")
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        trusted = entry.lower().rstrip("/")
        if "*" not in trusted:
            if trusted == normalised:
                return True
            continue
        parts = urlsplit(trusted)
        if parts.scheme == scheme and is_same_domain(urlsplit(normalised).netloc, parts.netloc.lstrip("*")):
            return True
    return False


def websocket_origin_allowed(*, origin: str, host: str) -> bool:
    """Whether a handshake with these Origin and Host headers may go on."""
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False
    given = _origin_parts(origin)
    if given is None:
        return False
    scheme, origin_host, origin_port = given
    if _trusted(origin, scheme):
        return True
    try:
        served = urlsplit(f"//{host}")
        served_port = served.port
    except ValueError:
        return False
    # A Host without a port is the default one of the scheme the page used.
    return served.hostname == origin_host and (served_port or DEFAULT_PORTS[scheme]) == origin_port


class SameOriginValidator:
    """ASGI middleware for websockets: refuses the handshake (403) unless
    ``websocket_origin_allowed``. A handshake with no Host, no Origin or more than one
    of either is refused too."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator is for websocket connections only")
        origins = [value for name, value in scope.get("headers", ()) if name == b"origin"]
        hosts = [value for name, value in scope.get("headers", ()) if name == b"host"]
        if (
            len(origins) == 1
            and len(hosts) == 1
            and websocket_origin_allowed(origin=origins[0].decode("latin1"), host=hosts[0].decode("latin1"))
        ):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
