"""Chat events are typed, and a ``chat-message`` event carries the message's list item as
the chat page renders it (static/js/chat.js inserts that; it builds no message itself)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from chat.events import ChatChunk, ChatMessageChange, ChatQueue
from chat.models import ChatMessage, ChatSession
from core.payloads import PayloadTypeError

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


@pytest.fixture
def session(owner) -> ChatSession:
    return ChatSession.objects.create(user=owner, project=None, last_activity=timezone.now())


def messages(session: ChatSession) -> list[ChatMessage]:
    question = ChatMessage.objects.create(
        session=session, role=ChatMessage.Role.USER, text=HOSTILE, status=ChatMessage.Status.DONE
    )
    queued = ChatMessage.objects.create(
        session=session,
        role=ChatMessage.Role.USER,
        text="and then?",
        status=ChatMessage.Status.QUEUED,
        attachment_type="image/png",
    )
    reply = ChatMessage.objects.create(
        session=session,
        role=ChatMessage.Role.ASSISTANT,
        text=f"You said {HOSTILE}",
        reply_to=question,
        confirmations=["Remembered: <i>tabs</i>"],
    )
    failed = ChatMessage.objects.create(
        session=session, role=ChatMessage.Role.ASSISTANT, text="Error: down", status=ChatMessage.Status.ERROR
    )
    return [question, queued, reply, failed]


def test_the_event_html_is_the_pages_rendering(owner_session_client, session: ChatSession) -> None:
    shown = messages(session)
    page = owner_session_client.get(reverse("chat:page")).content.decode()
    for message in shown:
        html = ChatMessageChange.of(message).html
        assert f'data-message-id="{message.pk}"' in html
        assert html in page
    assert "<script>" not in page.split("data-chat-messages", 1)[1].split("</ol>", 1)[0]
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page


def test_the_messages_partial_is_the_pages_rendering(owner_session_client, session: ChatSession) -> None:
    shown = messages(session)
    page = owner_session_client.get(reverse("chat:page")).content.decode()
    listing = owner_session_client.get(reverse("chat:messages")).content.decode()
    assert listing.strip() in page
    one = owner_session_client.get(reverse("chat:messages"), {"id": shown[2].pk}).content.decode()
    assert one == ChatMessageChange.of(shown[2]).html


def test_another_users_message_is_not_there(other_user, owner_session_client) -> None:
    theirs = ChatMessage.objects.create(
        session=ChatSession.objects.create(user=other_user, last_activity=timezone.now()),
        role=ChatMessage.Role.USER,
        text="mine",
    )
    response = owner_session_client.get(reverse("chat:messages"), {"id": theirs.pk})
    assert response.status_code == 404
    assert owner_session_client.get(reverse("chat:messages"), {"id": "x"}).status_code == 404


def test_an_empty_conversation_says_so(owner_session_client) -> None:
    listing = owner_session_client.get(reverse("chat:messages")).content.decode()
    assert "data-chat-empty" in listing


def test_the_message_event_keeps_its_data(session: ChatSession) -> None:
    question = messages(session)[0]
    data = ChatMessageChange.of(question).as_data()
    assert set(data) == {"message", "html"}
    assert data["message"]["id"] == question.pk
    assert data["message"]["text"] == HOSTILE
    assert data["message"]["reply_to"] is None


def test_chat_events_refuse_unknown_fields_and_wrong_types() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        ChatQueue(session_id=1, queue_size=0, processing=False, extra=1)  # type: ignore[call-arg]
    with pytest.raises(PayloadTypeError):
        ChatQueue(session_id=1, queue_size="0", processing=False)  # type: ignore[arg-type]
    with pytest.raises(PayloadTypeError):
        ChatChunk(session_id=1, message_id=None, chunk="x")  # type: ignore[arg-type]
