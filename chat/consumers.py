"""The chat websocket: the live stream of the user's conversation (``/ws/chat``,
``?project=<id>`` for a project's). Authenticates, checks the project through a
selector, joins the group and forwards ``chat-chunk``, ``chat-message`` and
``chat-queue`` events; nothing else."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from core.exceptions import NotFound
from pipelines.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED, KEEPALIVE_SECONDS
from projects.selectors import project_get_for_user

from .events import chat_group


class ChatConsumer(AsyncWebsocketConsumer):
    group_name = ""
    keepalive_seconds = KEEPALIVE_SECONDS
    _keepalive: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        project_id = (query.get("project") or [""])[0]
        project_pk: int | None = None
        if project_id:
            try:
                project = await database_sync_to_async(project_get_for_user)(user=user, project_id=project_id)
            except NotFound:
                await self.close(code=CLOSE_NOT_FOUND)
                return
            project_pk = project.pk
        self.group_name = chat_group(user.pk, project_pk)
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()
        self._keepalive = asyncio.ensure_future(self._ping())

    async def disconnect(self, code: int) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.group_name:
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Messages are sent over the API; anything a client sends here is ignored.
        return

    async def chat_event(self, message: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(message["event"]))

    async def _ping(self) -> None:
        while True:
            await asyncio.sleep(self.keepalive_seconds)
            await self.send(text_data=json.dumps({"type": "ping", "data": {}}))
