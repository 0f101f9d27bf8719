"""Chat with the assistant: sessions, the per-session FIFO queue and its one holder.

A message is stored as queued and a Celery task is queued on commit. The task claims
the session's lease (core/leases.py; refused: someone else is answering, and will reach
this message too); the holder answers the oldest queued message, one at a time, until
none remain, then releases. The process's renewer keeps the lease alive however long an
answer takes to buy, streamed or not. A holder that died stops renewing: its session is
taken over once the lease ran out (CHAT_LEASE_SECONDS), never before, and what it was
answering goes back to the front of the queue. Every write of the holder's (taking a
message, storing the reply, putting it back, releasing) is conditioned on still holding
the lease: one that stalled past it and wakes up writes nothing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from chat.events import ChatMessageChange, ChatQueue, chat_send_on_commit
from chat.models import CHAT_MESSAGE_MAX_LENGTH, ChatMessage, ChatSession
from chat.selectors import (
    chat_message_next_queued,
    chat_queue_position,
    chat_queue_size,
    chat_session_expiry_cutoff,
    chat_session_open_latest,
    chat_sessions_expired,
)
from core.exceptions import ApplicationError, Conflict
from core.jobs import enqueue, enqueue_on_commit
from core.leases import Lease, lease_held

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

logger = logging.getLogger(__name__)

NEW_SESSION_COMMAND = "/new"
NEW_SESSION_STARTED = "Started a new conversation. Earlier messages stay in your history."
EMPTY_TEXT = "Write a message."
TEXT_TOO_LONG = f"A message can have at most {CHAT_MESSAGE_MAX_LENGTH:,} characters."
IMAGE_TYPE_REFUSED = "The attachment must be a PNG, JPEG, GIF or WebP image."
IMAGE_TOO_LARGE = "The image is larger than {limit:,} bytes."
ERROR_PREFIX = "Error: "

# Provider session ids we resume (the Claude CLI's are UUIDs); anything else is corrupt.
PROVIDER_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")

IMAGE_SIGNATURES: tuple[tuple[str, bytes, int], ...] = (
    ("image/png", b"\x89PNG\r\n\x1a\n", 0),
    ("image/jpeg", b"\xff\xd8\xff", 0),
    ("image/gif", b"GIF87a", 0),
    ("image/gif", b"GIF89a", 0),
)


class ChatInputInvalid(ApplicationError):
    code = "invalid"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, extra={"fields": {field: [message]}})


@dataclass(frozen=True)
class ChatImage:
    data: bytes
    media_type: str


def chat_image_sniff(data: bytes) -> str | None:
    """The image's media type from its magic bytes, or None when it is not one we accept."""
    for media_type, signature, offset in IMAGE_SIGNATURES:
        if data[offset : offset + len(signature)] == signature:
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def chat_image_validate(*, data: bytes, max_bytes: int) -> ChatImage:
    if len(data) > max_bytes:
        raise ChatInputInvalid(IMAGE_TOO_LARGE.format(limit=max_bytes), field="image")
    media_type = chat_image_sniff(data)
    if media_type is None:
        raise ChatInputInvalid(IMAGE_TYPE_REFUSED, field="image")
    return ChatImage(data=data, media_type=media_type)


def _session_is_sound(session: ChatSession, user: User) -> bool:
    if session.provider_session_id and not PROVIDER_SESSION_ID.match(session.provider_session_id):
        logger.warning("Chat session %s has a corrupt provider session id; starting afresh", session.pk)
        return False
    if session.project_id is not None and (session.project is None or session.project.owner_id != user.pk):
        logger.warning("Chat session %s points at a project its user does not own; starting afresh", session.pk)
        return False
    return True


def _lock_user_chat(user: User) -> None:
    """Serialise the user's sends: two concurrent first messages must not open two
    sessions, and messages must commit in the order of their ids (the queue's order)."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True).first()


def _session_close(session: ChatSession) -> None:
    ChatSession.objects.filter(pk=session.pk, closed_at__isnull=True).update(closed_at=timezone.now())


@transaction.atomic
def chat_session_current(*, user: User, project: Project | None = None) -> ChatSession:
    """The session a new message goes to: the open one, unless it has been idle past
    the TTL or its state is corrupt, in which case it is closed and a fresh one begins."""
    _lock_user_chat(user)
    session = chat_session_open_latest(user=user, project=project)
    if session is not None:
        if session.last_activity < chat_session_expiry_cutoff() or not _session_is_sound(session, user):
            _session_close(session)
        else:
            return session
    return ChatSession.objects.create(user=user, project=project, last_activity=timezone.now())


@transaction.atomic
def chat_session_new(*, user: User, project: Project | None = None) -> ChatSession:
    _lock_user_chat(user)
    current = chat_session_open_latest(user=user, project=project)
    if current is not None:
        _session_close(current)
    return ChatSession.objects.create(user=user, project=project, last_activity=timezone.now())


def _publish_queue(session: ChatSession) -> None:
    processing = ChatSession.objects.filter(lease_held(), pk=session.pk).exists()
    chat_send_on_commit(
        user_id=session.user_id,
        project_id=session.project_id,
        event=ChatQueue(
            session_id=session.pk, queue_size=chat_queue_size(session_id=session.pk), processing=processing
        ),
    )


def _publish_message(message: ChatMessage) -> None:
    chat_send_on_commit(
        user_id=message.session.user_id,
        project_id=message.session.project_id,
        event=ChatMessageChange.of(message),
    )


def _count_messages(session: ChatSession, count: int) -> None:
    ChatSession.objects.filter(pk=session.pk).update(
        message_count=F("message_count") + count, last_activity=timezone.now()
    )


@transaction.atomic
def chat_message_send(
    *, user: User, project: Project | None = None, text: str, image: ChatImage | None = None
) -> tuple[ChatMessage, int]:
    """Queue the user's message; returns it and its place in the queue (1 = next).

    ``/new`` is not queued: it closes the current session at once and answers with a
    short confirmation (no model call)."""
    if not text.strip():
        raise ChatInputInvalid(EMPTY_TEXT, field="text")
    _lock_user_chat(user)
    if len(text) > CHAT_MESSAGE_MAX_LENGTH:
        raise ChatInputInvalid(TEXT_TOO_LONG, field="text")
    if text.strip() == NEW_SESSION_COMMAND and image is None:
        session = chat_session_new(user=user, project=project)
        command = ChatMessage.objects.create(session=session, role=ChatMessage.Role.USER, text=NEW_SESSION_COMMAND)
        reply = ChatMessage.objects.create(
            session=session, role=ChatMessage.Role.ASSISTANT, text=NEW_SESSION_STARTED, reply_to=command
        )
        _count_messages(session, 2)
        _publish_message(command)
        _publish_message(reply)
        _publish_queue(session)
        return command, 0
    session = chat_session_current(user=user, project=project)
    message = ChatMessage.objects.create(
        session=session,
        role=ChatMessage.Role.USER,
        text=text,
        status=ChatMessage.Status.QUEUED,
        attachment=image.data if image else None,
        attachment_type=image.media_type if image else "",
    )
    _count_messages(session, 1)
    position = chat_queue_position(message=message)
    _publish_message(message)
    _publish_queue(session)
    session_id = session.pk

    enqueue_on_commit("chat.tasks.chat_answer_queue", session_id)
    return message, position


# --- The queue's holder -----------------------------------------------------------------

LEASE_LOST = "Another worker answers this session now: this one's lease ran out."


class ChatLeaseLost(Conflict):
    code = "lease_lost"


class ChatLease(Lease):
    """A worker's claim on answering one session's queue."""

    logger = logger

    def __init__(self, session_id: int) -> None:
        super().__init__(
            ChatSession, session_id, seconds=settings.CHAT_LEASE_SECONDS, name=f"Chat session {session_id}"
        )


def chat_queue_claim(*, session_id: int) -> ChatLease | None:
    """Become the one answering this session's queue: its lease, or None when someone
    else holds it (or the session is gone). A holder whose lease ran out is replaced."""
    lease = ChatLease(session_id)
    if not lease.claim():
        return None
    # Nobody else holds the session now: a message left being answered was a dead (or
    # stalled) holder's, and goes back to the front of the queue.
    requeued = ChatMessage.objects.filter(
        session_id=session_id, status=ChatMessage.Status.PROCESSING, session__lease_owner=lease.token
    ).update(status=ChatMessage.Status.QUEUED)
    if requeued:
        logger.warning("Chat session %s: the previous holder's lease ran out; taking over", session_id)
    return lease


def chat_queue_release(*, lease: ChatLease) -> None:
    """Give the session back, if it is still ours (a holder that lost it leaves its
    successor's claim alone)."""
    with transaction.atomic():
        lease.release()
        session = ChatSession.objects.filter(pk=lease.pk).first()
        if session is not None:
            _publish_queue(session)


@transaction.atomic
def chat_message_take_next(*, session_id: int, held_by: str) -> ChatMessage | None:
    """Mark the oldest queued message as being answered and return it; None when there
    is none, or the lease ``held_by`` no longer holds the session."""
    message = chat_message_next_queued(session_id=session_id)
    if message is None:
        return None
    if not ChatMessage.objects.filter(
        pk=message.pk, status=ChatMessage.Status.QUEUED, session__lease_owner=held_by
    ).update(status=ChatMessage.Status.PROCESSING):
        return None
    message.status = ChatMessage.Status.PROCESSING
    _publish_queue(message.session)
    return message


def chat_message_requeue(*, message: ChatMessage, held_by: str) -> None:
    """The holder is stopping mid-answer: the message waits for the next one (unless
    the holder lost the session: then its successor has it already)."""
    ChatMessage.objects.filter(
        pk=message.pk, status=ChatMessage.Status.PROCESSING, session__lease_owner=held_by
    ).update(status=ChatMessage.Status.QUEUED)


@transaction.atomic
def chat_reply_save(
    *,
    message: ChatMessage,
    held_by: str,
    text: str,
    confirmations: list[str] | None = None,
    error: bool = False,
    input_tokens: int = 0,
    output_tokens: int = 0,
    provider_session_id: str = "",
) -> ChatMessage:
    """Store the assistant's reply to ``message`` (an ``Error: …`` reply when ``error``),
    if the lease ``held_by`` still holds the session; else ChatLeaseLost (and nothing
    of the caller's transaction is written)."""
    updates: dict[str, Any] = {"message_count": F("message_count") + 1, "last_activity": timezone.now()}
    if provider_session_id and PROVIDER_SESSION_ID.match(provider_session_id):
        updates["provider_session_id"] = provider_session_id
    if not ChatSession.objects.filter(pk=message.session_id, lease_owner=held_by).update(**updates):
        raise ChatLeaseLost(LEASE_LOST)
    reply = ChatMessage.objects.create(
        session=message.session,
        role=ChatMessage.Role.ASSISTANT,
        text=text[:CHAT_MESSAGE_MAX_LENGTH],
        confirmations=confirmations or [],
        status=ChatMessage.Status.ERROR if error else ChatMessage.Status.DONE,
        reply_to=message,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )
    ChatMessage.objects.filter(pk=message.pk).update(status=ChatMessage.Status.DONE)
    message.status = ChatMessage.Status.DONE
    _publish_message(reply)
    return reply


def chat_sessions_expire() -> int:
    """Close the sessions idle past the TTL; returns how many."""
    return chat_sessions_expired().update(closed_at=timezone.now())


def chat_queues_sweep() -> list[int]:
    """Sessions with waiting messages and nobody answering (a lost task, a dead holder):
    queue their answering again. Returns their ids."""
    waiting = (
        ChatMessage.objects.filter(status__in=[ChatMessage.Status.QUEUED, ChatMessage.Status.PROCESSING])
        .filter(created_at__lt=timezone.now() - timedelta(seconds=60))
        .values_list("session_id", flat=True)
        .distinct()
    )
    session_ids = list(
        ChatSession.objects.filter(pk__in=list(waiting)).exclude(lease_held()).values_list("pk", flat=True)
    )
    for session_id in session_ids:
        enqueue("chat.tasks.chat_answer_queue", session_id)
    return session_ids
