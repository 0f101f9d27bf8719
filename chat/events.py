"""Live chat events: typed payloads sent to the user's chat group.

Every event is ``{"type": ..., "data": {...}}`` like the pipeline's (docs/ARCHITECTURE.md, Live events).
Chat events are not persisted as events: the messages themselves are, and a reloaded
page renders them. Chunks are sent as they stream (best effort); the rest on commit.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.db import transaction

from core import live

if TYPE_CHECKING:
    from chat.models import ChatMessage

logger = logging.getLogger(__name__)

# The message type consumers implement a handler for (``chat_event``).
CONSUMER_MESSAGE_TYPE = "chat.event"


class ChatEventType(StrEnum):
    CHUNK = "chat-chunk"
    MESSAGE = "chat-message"
    QUEUE = "chat-queue"


def chat_message_payload(message: ChatMessage) -> dict[str, Any]:
    """A message as the API and the page show it (the attachment only as a flag)."""
    return {
        "id": message.pk,
        "session_id": message.session_id,
        "role": message.role,
        "text": message.text,
        "confirmations": list(message.confirmations or []),
        "status": message.status,
        "reply_to": message.reply_to_id,
        "has_image": bool(message.attachment_type),
        "created_at": message.created_at.isoformat() if message.created_at else None,
    }


def chat_group(user_id: int, project_id: int | None = None) -> str:
    """One group per user and project: every open chat page of that conversation."""
    return f"chat-user-{user_id}" if project_id is None else f"chat-user-{user_id}-project-{project_id}"


def chat_send_now(*, user_id: int, project_id: int | None, event_type: ChatEventType, data: dict[str, Any]) -> None:
    """Send to the user's open chat pages at once (outside any transaction)."""
    message = {"type": str(event_type), "data": data}
    try:
        live.group_send(chat_group(user_id, project_id), {"type": CONSUMER_MESSAGE_TYPE, "event": message})
    except Exception:
        # Live delivery is best effort: the page reloads history from the database.
        logger.warning("Could not send %s to user %s", event_type, user_id, exc_info=True)


def chat_send_on_commit(
    *, user_id: int, project_id: int | None, event_type: ChatEventType, data: dict[str, Any]
) -> None:
    transaction.on_commit(
        lambda: chat_send_now(user_id=user_id, project_id=project_id, event_type=event_type, data=data)
    )
