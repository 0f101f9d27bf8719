"""The chat websocket: the live stream of the user's conversation (``/ws/chat``,
``?project=<id>`` for a project's). core.consumers.LiveConsumer does the login, close
codes and keepalive; this checks the project through a selector and forwards
``chat-chunk``, ``chat-message`` and ``chat-queue`` events; nothing else."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from core.consumers import LiveConsumer
from projects.selectors import project_get_for_user

from .events import chat_group


class ChatConsumer(LiveConsumer):
    async def resolve_group(self, user: Any) -> str | None:
        project_id = self.query_param("project")
        project_pk: int | None = None
        if project_id:
            project = await database_sync_to_async(project_get_for_user)(user=user, project_id=project_id)
            project_pk = project.pk
        return chat_group(user.pk, project_pk)

    forwarding_handlers = frozenset({"chat_event"})

    async def chat_event(self, message: dict[str, Any]) -> None:
        await self.send_event(message["event"], message.get("text"))
