"""Websocket routes (docs/ARCHITECTURE.md, Live events)."""

from __future__ import annotations

from channels.generic.websocket import WebsocketConsumer
from django.urls import URLPattern, re_path

from chat.routing import websocket_urlpatterns as chat_websockets
from pipelines.routing import websocket_urlpatterns as pipeline_websockets


class UnknownPathConsumer(WebsocketConsumer):
    """Refuses the handshake of any path no route claims, instead of letting the
    router raise (which daphne logs as a server error)."""

    def connect(self) -> None:
        self.close()


websocket_urlpatterns: list[URLPattern] = [*pipeline_websockets, *chat_websockets]
unknown_path_route = re_path(r"", UnknownPathConsumer.as_asgi())
