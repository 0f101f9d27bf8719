"""Websockets: a task's live events, and a project board's.

Consumers (core.consumers.LiveConsumer: login, close codes, keepalive) check access
through a selector, join the group and forward events; nothing else. On connect they
replay what was persisted after ``?last_event_id=`` (a reloaded page shows the whole
history), then forward live events, skipping any already replayed. A task's socket replays in place
too when the channel layer says it lost Redis for a while; a board's is closed, and the
page reloads its state when it reconnects.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from core.consumers import LiveConsumer
from pipelines.events import as_message, project_group, task_group
from pipelines.runs.selectors import run_events
from projects.selectors import project_get_for_user
from tasks.models import Task
from tasks.selectors import task_get_for_user


class _EventsConsumer(LiveConsumer):
    # A task's events come from one worker in id order; a board mixes tasks, whose
    # events may commit out of id order, so it must not skip by id.
    skip_seen = True
    # Whether backlog() can send what the socket missed (else it is closed to catch up).
    replays = True
    last_id = 0
    forwarding_handlers = frozenset({"event_message"})

    @property
    def object_id(self) -> str:
        return str(self.scope["url_route"]["kwargs"]["object_id"])

    async def backlog(self, after_id: int) -> list[dict[str, Any]]:
        return []

    async def accepted(self) -> None:
        try:
            after_id = max(0, int(self.query_param("last_event_id") or "0"))
        except ValueError:
            after_id = 0
        self.last_id = after_id
        for message in await self.backlog(after_id):
            await self._forward(message)

    async def layer_resubscribed(self, message: dict[str, Any]) -> None:
        if not self.replays:
            await super().layer_resubscribed(message)
            return
        # Events published while the layer was not subscribed are stored: send them
        # from the last one this socket saw, in place. Live ones that follow are
        # skipped by id if the replay already sent them.
        for event in await self.backlog(self.last_id):
            await self._forward(event)

    async def event_message(self, message: dict[str, Any]) -> None:
        await self._forward(message["event"], message.get("text"))

    async def _forward(self, event: dict[str, Any], text: str | None = None) -> None:
        event_id = event.get("id") or 0
        if self.skip_seen and event_id and event_id <= self.last_id:
            return
        self.last_id = max(self.last_id, event_id)
        await self.send_event(event, text)


class TaskEventsConsumer(_EventsConsumer):
    task: Task | None = None

    async def resolve_group(self, user: Any) -> str | None:
        self.task = await database_sync_to_async(task_get_for_user)(user=user, task_id=self.object_id)
        return task_group(self.task.pk)

    async def backlog(self, after_id: int) -> list[dict[str, Any]]:
        def load() -> list[dict[str, Any]]:
            assert self.task is not None
            return [as_message(event) for event in run_events(task=self.task, after_id=after_id)]

        return await database_sync_to_async(load)()


class ProjectBoardConsumer(_EventsConsumer):
    """Column moves and run progress of every task on a board; no replay (the board
    page renders the current state)."""

    skip_seen = False
    replays = False

    async def resolve_group(self, user: Any) -> str | None:
        project = await database_sync_to_async(project_get_for_user)(user=user, project_id=self.object_id)
        return project_group(project.pk)
