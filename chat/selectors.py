"""Reads of chat sessions and messages. Not yours and not there look the same."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from chat.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

# How many earlier messages (user + assistant) the model sees with a new one.
CHAT_HISTORY_LIMIT = 20


def chat_session_expiry_cutoff() -> Any:
    return timezone.now() - timedelta(hours=settings.CHAT_SESSION_TTL_HOURS)


def chat_session_open_latest(*, user: User, project: Project | None = None) -> ChatSession | None:
    """The newest open session of the user (in this project, or outside any), expired or not."""
    return (
        ChatSession.objects.filter(user=user, project=project, closed_at__isnull=True)
        .select_related("project")
        .order_by("-last_activity", "-pk")
        .first()
    )


def chat_message_list(
    *, user: User, project: Project | None = None, session: ChatSession | None
) -> QuerySet[ChatMessage]:
    """Messages as shown to the user, oldest first: of ``session``, or of all the
    user's sessions (in this project) when ``session`` is None."""
    messages = ChatMessage.objects.filter(session__user=user, session__project=project)
    if session is not None:
        messages = messages.filter(session=session)
    return messages.defer("attachment").order_by("created_at", "id")


def chat_queue_size(*, session_id: int) -> int:
    return ChatMessage.objects.filter(
        session_id=session_id,
        role=ChatMessage.Role.USER,
        status__in=[ChatMessage.Status.QUEUED, ChatMessage.Status.PROCESSING],
    ).count()


def chat_queue_position(*, message: ChatMessage) -> int:
    """1 for the message answered next (or now); 0 when it is not waiting."""
    if message.status not in (ChatMessage.Status.QUEUED, ChatMessage.Status.PROCESSING):
        return 0
    return ChatMessage.objects.filter(
        session_id=message.session_id,
        role=ChatMessage.Role.USER,
        status__in=[ChatMessage.Status.QUEUED, ChatMessage.Status.PROCESSING],
        id__lte=message.pk,
    ).count()


def chat_session_current_open(*, user: User, project: Project | None = None) -> ChatSession | None:
    """The conversation in progress, or None when there is none or it has expired."""
    session = chat_session_open_latest(user=user, project=project)
    if session is None or session.last_activity < chat_session_expiry_cutoff():
        return None
    return session


def chat_session_state(*, user: User, project: Project | None = None) -> dict[str, Any]:
    session = chat_session_current_open(user=user, project=project)
    if session is None:
        return {"session_id": None, "last_activity": None, "message_count": 0, "queue_size": 0, "processing": False}
    return {
        "session_id": session.pk,
        "last_activity": session.last_activity,
        "message_count": session.message_count,
        "queue_size": chat_queue_size(session_id=session.pk),
        "processing": session.processing,
    }


def chat_message_next_queued(*, session_id: int) -> ChatMessage | None:
    return (
        ChatMessage.objects.filter(session_id=session_id, role=ChatMessage.Role.USER, status=ChatMessage.Status.QUEUED)
        .select_related("session", "session__user", "session__project")
        .order_by("id")
        .first()
    )


def chat_history_for_prompt(*, message: ChatMessage, limit: int = CHAT_HISTORY_LIMIT) -> list[ChatMessage]:
    """The session's answered exchanges before ``message``, oldest first, as alternating
    user / assistant messages (at most ``limit``). Failed exchanges are left out."""
    replies = list(
        ChatMessage.objects.filter(
            session_id=message.session_id,
            role=ChatMessage.Role.ASSISTANT,
            status=ChatMessage.Status.DONE,
            reply_to__isnull=False,
            reply_to__id__lt=message.pk,
        )
        .select_related("reply_to")
        .defer("attachment", "reply_to__attachment")
        .order_by("-reply_to__id")[: max(0, limit // 2)]
    )
    history: list[ChatMessage] = []
    for reply in reversed(replies):
        assert reply.reply_to is not None
        history.extend([reply.reply_to, reply])
    return history


def chat_sessions_expired() -> QuerySet[ChatSession]:
    return ChatSession.objects.filter(closed_at__isnull=True, last_activity__lt=chat_session_expiry_cutoff())
