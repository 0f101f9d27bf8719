"""Live chat events: typed payloads sent to the user's chat group.

Every event is ``{"type": ..., "data": {...}}`` like the pipeline's (docs/ARCHITECTURE.md,
Live events); each type's ``data`` is one class below (``core.payloads.Payload``: an
unknown field or a value of the wrong type is refused when it is built). Chat events are
not persisted as events: the messages themselves are, and a reloaded page renders them.
Chunks are sent as they stream (best effort); the rest on commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from django.db import transaction
from django.template.loader import render_to_string

from core import live
from core.payloads import Payload

if TYPE_CHECKING:
    from chat.models import ChatMessage

logger = logging.getLogger(__name__)

# The message type consumers implement a handler for (``chat_event``).
CONSUMER_MESSAGE_TYPE = "chat.event"
# The one rendering of a message: the chat page's list and the ``chat-message`` event.
MESSAGE_TEMPLATE = "chat/_chat_message.html"


class ChatEventType(StrEnum):
    CHUNK = "chat-chunk"
    MESSAGE = "chat-message"
    QUEUE = "chat-queue"


@dataclass(frozen=True, kw_only=True)
class ChatMessageData(Payload):
    """A message as the API and the page show it (the attachment only as a flag)."""

    id: int
    session_id: int
    role: str
    text: str
    confirmations: list[str]
    status: str
    reply_to: int | None
    has_image: bool
    created_at: str | None


def chat_message_data(message: ChatMessage) -> ChatMessageData:
    return ChatMessageData(
        id=message.pk,
        session_id=message.session_id,
        role=str(message.role),
        text=message.text,
        confirmations=[str(line) for line in message.confirmations or []],
        status=str(message.status),
        reply_to=message.reply_to_id,
        has_image=bool(message.attachment_type),
        created_at=message.created_at.isoformat() if message.created_at else None,
    )


def chat_message_payload(message: ChatMessage) -> dict[str, Any]:
    """A message as the API returns it, and as the page's template reads it."""
    return chat_message_data(message).as_data()


def chat_message_html(payload: dict[str, Any]) -> str:
    """The message's list item, exactly as the chat page renders it."""
    return render_to_string(MESSAGE_TEMPLATE, {"m": payload})


@dataclass(frozen=True, kw_only=True)
class ChatEvent(Payload):
    event_type: ClassVar[ChatEventType]


@dataclass(frozen=True, kw_only=True)
class ChatChunk(ChatEvent):
    """A piece of the reply to ``message_id`` as it streams (coalesced)."""

    event_type = ChatEventType.CHUNK
    session_id: int
    message_id: int
    chunk: str


@dataclass(frozen=True, kw_only=True)
class ChatMessageChange(ChatEvent):
    """A message was added or changed: its data, and ``html``, its list item as the page
    renders it (the page inserts that; it never builds a message itself)."""

    event_type = ChatEventType.MESSAGE
    message: ChatMessageData
    html: str

    @classmethod
    def of(cls, message: ChatMessage) -> ChatMessageChange:
        data = chat_message_data(message)
        return cls(message=data, html=chat_message_html(data.as_data()))


@dataclass(frozen=True, kw_only=True)
class ChatQueue(ChatEvent):
    event_type = ChatEventType.QUEUE
    session_id: int
    queue_size: int
    processing: bool


def chat_group(user_id: int, project_id: int | None = None) -> str:
    """One group per user and project: every open chat page of that conversation."""
    return f"chat-user-{user_id}" if project_id is None else f"chat-user-{user_id}-project-{project_id}"


def chat_send_now(*, user_id: int, project_id: int | None, event: ChatEvent) -> None:
    """Send to the user's open chat pages at once (outside any transaction)."""
    message = {"type": str(event.event_type), "data": event.as_data()}
    try:
        live.group_send(chat_group(user_id, project_id), live.event_message(CONSUMER_MESSAGE_TYPE, message))
    except Exception:
        # Live delivery is best effort: the page reloads history from the database.
        logger.warning("Could not send %s to user %s", event.event_type, user_id, exc_info=True)


def chat_send_on_commit(*, user_id: int, project_id: int | None, event: ChatEvent) -> None:
    transaction.on_commit(lambda: chat_send_now(user_id=user_id, project_id=project_id, event=event))
