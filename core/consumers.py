"""The base of every websocket: a one-way live stream of a group's events for a
logged-in user.

What comes before a consumer is in config/asgi.py, once for every path: the Origin check
(AllowedHostsOriginValidator: a cross-site page cannot open a socket with the user's
session cookie) and the login (session cookie, or ``Authorization: Token``). This class
refuses anonymous users, asks the subclass which group the socket follows (a selector's
NotFound, or None, closes it: not there and not yours are the same; a refused socket is
accepted and closed at once with its close code, so that the page learns it), joins the group,
accepts, lets the subclass replay a backlog, then pings every ``keepalive_seconds`` so
that proxies keep an idle socket open. What a client sends is ignored. When the channel
layer says it lost Redis for a while (``layer_resubscribed``), the socket is closed with
1012 so that the page reconnects and catches up, unless the subclass replays in place.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer

from .exceptions import NotFound

KEEPALIVE_SECONDS = 30.0
# Close codes: 4401 not authenticated, 4404 not found or not yours (same for both).
# The pages' scripts (static/js/app.js, liveSocket) do not reconnect after these.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
# "Service restart": the page's script reconnects, and a page catches up when it does.
CLOSE_CATCH_UP = 1012


class LiveConsumer(AsyncWebsocketConsumer):
    group_name = ""
    keepalive_seconds = KEEPALIVE_SECONDS
    _keepalive: asyncio.Task[None] | None = None
    #: Handlers (of channel-layer messages) that only pass an event on to the socket and
    #: never touch the database: they skip Channels' per-message connection clean-up.
    forwarding_handlers: frozenset[str] = frozenset()

    async def resolve_group(self, user: Any) -> str | None:
        """The group this socket follows, for this user; None (or NotFound) if the
        object it names is missing or not theirs."""
        raise NotImplementedError

    async def accepted(self) -> None:
        """Called once the socket is open and in its group: e.g. replay a backlog."""

    def query_param(self, name: str) -> str:
        """The first value of ``name`` in the handshake's query string, or ""."""
        query = parse_qs(self.scope.get("query_string", b"").decode())
        return (query.get(name) or [""])[0]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        try:
            group = await self.resolve_group(user)
        except NotFound:
            group = None
        if group is None:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        self.group_name = group
        # Join first, then replay: an event published in between arrives live, and a
        # subclass that replays can skip it by id.
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.accepted()
        self._keepalive = asyncio.ensure_future(self._ping())

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels runs close_old_connections() on its one sync thread before every
        # handler: a thread hop per socket and event, half of daphne's CPU with 200 pages
        # on one run (bench/bench_events.py, py-spy). A handler that only forwards needs
        # no database; the rest go through database_sync_to_async, which cleans up itself.
        handler_name = get_handler_name(message)
        if handler_name in self.forwarding_handlers:
            await getattr(self, handler_name)(message)
            return
        await super().dispatch(message)

    async def _refuse(self, code: int) -> None:
        """Accept, then close at once with ``code``, sending nothing else.

        A close before the handshake is accepted reaches a browser as a refused handshake
        (close code 1006): the page could not tell "signed out" from a network drop and
        would retry for ever. Accepted first, the close carries the code, and the page
        stops and says why."""
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.group_name:
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The stream is one-way; anything a client sends is ignored (not echoed, not parsed).
        return

    async def layer_resubscribed(self, message: dict[str, Any]) -> None:
        """The channel layer lost Redis and is subscribed again (core.live
        RESUBSCRIBED_MESSAGE_TYPE): events published in between never came. By default
        the socket is closed so that the page reconnects and catches up as after any
        drop; a consumer that can replay what it missed does that instead."""
        await self.close(code=CLOSE_CATCH_UP)

    async def send_event(self, event: dict[str, Any], text: str | None = None) -> None:
        """Send ``event``; ``text`` is its JSON when the publisher encoded it already
        (once for every socket of the group, core.live.event_message)."""
        await self.send(text_data=json.dumps(event) if text is None else text)

    async def _ping(self) -> None:
        while True:
            await asyncio.sleep(self.keepalive_seconds)
            await self.send_event({"type": "ping", "data": {}})
