"""Websockets: a task's live events, and a project board's.

Consumers authenticate, check access through a selector, join the group and forward
events; nothing else. On connect they replay what was persisted after
``?last_event_id=`` (a reloaded page shows the whole history), then forward live events,
skipping any already replayed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from core.exceptions import NotFound
from projects.selectors import project_get_for_user
from tasks.selectors import task_get_for_user

from .events import as_message, project_group, task_group
from .models import RunEvent

KEEPALIVE_SECONDS = 30.0
# Close codes: 4401 not authenticated, 4404 not found or not yours (same for both).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class _EventsConsumer(AsyncWebsocketConsumer):
    group_name = ""
    # A task's events come from one worker in id order; a board mixes tasks, whose
    # events may commit out of id order, so it must not skip by id.
    skip_seen = True
    last_id = 0
    keepalive_seconds = KEEPALIVE_SECONDS
    _keepalive: asyncio.Task[None] | None = None

    async def resolve_group(self, user: Any, object_id: str) -> str | None:
        raise NotImplementedError

    async def backlog(self, after_id: int) -> list[dict[str, Any]]:
        return []

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        group = await self.resolve_group(user, self.scope["url_route"]["kwargs"]["object_id"])
        if group is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group_name = group
        # Join first, then replay: an event published in between arrives live and is
        # skipped by id if the replay already carried it.
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        query = parse_qs(self.scope.get("query_string", b"").decode())
        try:
            after_id = max(0, int(query.get("last_event_id", ["0"])[0]))
        except ValueError:
            after_id = 0
        self.last_id = after_id
        for message in await self.backlog(after_id):
            await self._forward(message)
        self._keepalive = asyncio.ensure_future(self._ping())

    async def disconnect(self, code: int) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.group_name:
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The stream is one-way; anything a client sends is ignored (not echoed, not parsed).
        return

    async def event_message(self, message: dict[str, Any]) -> None:
        await self._forward(message["event"])

    async def _forward(self, event: dict[str, Any]) -> None:
        event_id = event.get("id") or 0
        if self.skip_seen and event_id and event_id <= self.last_id:
            return
        self.last_id = max(self.last_id, event_id)
        await self.send(text_data=json.dumps(event))

    async def _ping(self) -> None:
        while True:
            await asyncio.sleep(self.keepalive_seconds)
            await self.send(text_data=json.dumps({"type": "ping", "data": {}}))


class TaskEventsConsumer(_EventsConsumer):
    task_id: int = 0

    async def resolve_group(self, user: Any, object_id: str) -> str | None:
        try:
            task = await database_sync_to_async(task_get_for_user)(user=user, task_id=object_id)
        except NotFound:
            return None
        self.task_id = task.pk
        return task_group(task.pk)

    async def backlog(self, after_id: int) -> list[dict[str, Any]]:
        def load() -> list[dict[str, Any]]:
            events = RunEvent.objects.filter(task_id=self.task_id, id__gt=after_id).order_by("id")[:5000]
            return [as_message(event) for event in events]

        return await database_sync_to_async(load)()


class ProjectBoardConsumer(_EventsConsumer):
    """Column moves and run progress of every task on a board; no replay (the board
    page renders the current state)."""

    skip_seen = False

    async def resolve_group(self, user: Any, object_id: str) -> str | None:
        try:
            project = await database_sync_to_async(project_get_for_user)(user=user, project_id=object_id)
        except NotFound:
            return None
        return project_group(project.pk)
