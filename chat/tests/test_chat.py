"""Chat with the assistant: the API, sessions (TTL, /new, corrupt state), the queue's
one holder, markers, provider errors and attachments. The LLM is the fake Anthropic
server; answering runs in the test's thread (the worker end to end is in
test_chat_live.py)."""

from __future__ import annotations

import base64
import io
import logging
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.utils import timezone

from chat.models import ChatMessage, ChatSession
from chat.services import (
    EMPTY_TEXT,
    IMAGE_TOO_LARGE,
    IMAGE_TYPE_REFUSED,
    NEW_SESSION_STARTED,
    TEXT_TOO_LONG,
    chat_message_send,
    chat_queue_claim,
    chat_session_current,
)
from chat.worker import chat_queue_process
from core.workers import shutdown_requested
from memory.models import Fact
from memory.services.facts import fact_create
from tests.api_helpers import assert_error, field_errors
from tests.fake_anthropic import HttpError, RecordedRequest, TextReply

pytestmark = pytest.mark.django_db

MESSAGES_URL = "/api/chat/messages"
SESSION_URL = "/api/chat/session"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
WEBP = b"RIFF\x20\x00\x00\x00WEBPVP8 " + b"\x00" * 32


@pytest.fixture(autouse=True)
def _worker_not_stopping() -> None:
    # An embedded worker stopped by an earlier test leaves the process-wide stop flag
    # set; answering in this thread must not read it as its own shutdown.
    shutdown_requested.clear()


def last_user_text(request: RecordedRequest) -> str:
    content = request.body["messages"][-1]["content"]
    if isinstance(content, list):
        return next(block["text"] for block in content if block.get("type") == "text")
    return content


def echo(request: RecordedRequest) -> TextReply:
    return TextReply(text=f"answer to: {last_user_text(request)}")


def send(client, text: str, **extra):
    return client.post(MESSAGES_URL, {"text": text, **extra}, format="json")


def answer_all(owner, project=None) -> int:
    session = ChatSession.objects.get(user=owner, project=project, closed_at__isnull=True)
    return chat_queue_process(session_id=session.pk)


# --- Sending -----------------------------------------------------------------------------


def test_send_queues_the_message_and_its_answering_on_commit(
    owner_client, owner, django_capture_on_commit_callbacks, monkeypatch
):
    queued: list[int] = []
    monkeypatch.setattr("chat.tasks.chat_answer_queue.delay", queued.append)
    with django_capture_on_commit_callbacks() as callbacks:
        response = send(owner_client, "Hello")
    assert queued == []  # not before the commit
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["queue_position"] == 1
    assert body["message"]["text"] == "Hello"
    assert body["message"]["status"] == "queued"
    assert body["message"]["role"] == "user"
    session = ChatSession.objects.get(user=owner)
    for callback in callbacks:
        callback()
    assert queued == [session.pk]
    assert session.message_count == 1
    second = send(owner_client, "Again").json()
    assert second["queue_position"] == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [("", None), ("   \n ", None), ("x" * 20_001, None)],
)
def test_send_refuses_empty_and_too_long_text(owner_client, text, message) -> None:
    errors = field_errors(send(owner_client, text))
    assert "text" in errors
    assert not ChatMessage.objects.exists()


def test_service_messages_for_bad_text(owner) -> None:
    from chat.services import ChatInputInvalid

    with pytest.raises(ChatInputInvalid, match=EMPTY_TEXT):
        chat_message_send(user=owner, text=" ")
    with pytest.raises(ChatInputInvalid) as excinfo:
        chat_message_send(user=owner, text="y" * 20_001)
    assert excinfo.value.message == TEXT_TOO_LONG


def test_send_refuses_missing_or_non_string_text(owner_client) -> None:
    assert "text" in field_errors(owner_client.post(MESSAGES_URL, {}, format="json"))
    assert "text" in field_errors(owner_client.post(MESSAGES_URL, {"text": 5}, format="json"))


def test_project_must_be_yours(owner_client, project, other_project) -> None:
    assert_error(send(owner_client, "Hi", project=other_project.pk), 404, "not_found")
    assert_error(owner_client.get(MESSAGES_URL, {"project": other_project.pk}), 404, "not_found")
    assert_error(owner_client.get(SESSION_URL, {"project": other_project.pk}), 404, "not_found")
    assert send(owner_client, "Hi", project=project.pk).status_code == 202
    assert ChatSession.objects.get().project == project


def test_anonymous_is_refused(anon_client, client) -> None:
    assert anon_client.get(MESSAGES_URL).status_code == 401
    assert anon_client.post(MESSAGES_URL, {"text": "hi"}, format="json").status_code == 401
    assert anon_client.get(SESSION_URL).status_code == 401
    page = client.get("/chat/")
    assert page.status_code == 302
    assert "/accounts/login" in page["Location"]


def test_other_user_sees_nothing(owner_client, other_client, owner) -> None:
    send(owner_client, "secret plans")
    assert other_client.get(MESSAGES_URL).json()["results"] == []
    assert other_client.get(MESSAGES_URL, {"session": "all"}).json()["results"] == []
    state = other_client.get(SESSION_URL).json()
    assert state["session_id"] is None
    assert state["queue_size"] == 0


# --- Answering -----------------------------------------------------------------------------


def test_messages_are_answered_in_order_with_history_and_memory(owner_client, owner, fake_llm) -> None:
    fake_llm.fallback = echo
    fact_create(user=owner, content="The user prefers Rust")
    for text in ("first", "second", "third"):
        send(owner_client, text)
    assert answer_all(owner) == 3

    history = owner_client.get(MESSAGES_URL).json()["results"]
    # In the order they were written: the three questions (queued), then the answers.
    assert [(m["role"], m["text"]) for m in history] == [
        ("user", "first"),
        ("user", "second"),
        ("user", "third"),
        ("assistant", "answer to: first"),
        ("assistant", "answer to: second"),
        ("assistant", "answer to: third"),
    ]
    assert all(m["status"] == "done" for m in history)
    assert [m["reply_to"] for m in history[3:]] == [m["id"] for m in history[:3]]

    assert len(fake_llm.requests) == 3
    assert "The user prefers Rust" in fake_llm.requests[0].system_text
    assert "REMEMBER" in fake_llm.requests[0].system_text
    assert fake_llm.requests[2].message_texts == [
        "first",
        "answer to: first",
        "second",
        "answer to: second",
        "third",
    ]
    state = owner_client.get(SESSION_URL).json()
    assert state["message_count"] == 6
    assert state["queue_size"] == 0
    assert state["processing"] is False


def test_history_sent_to_the_model_is_bounded(owner, fake_llm) -> None:
    fake_llm.fallback = echo
    for number in range(14):
        chat_message_send(user=owner, text=f"m{number}")
    answer_all(owner)
    last = fake_llm.requests[-1].message_texts
    assert len(last) == 21  # the 10 newest exchanges + the new message
    assert last[0] == "m3"
    assert last[-1] == "m13"


def test_markers_in_the_reply_are_stored_stripped_and_confirmed(owner_client, owner, fake_llm) -> None:
    fake_llm.script(TextReply(text="Noted, I will keep it in mind. [REMEMBER: Alice deploys on Fridays]"))
    send(owner_client, "Remember that I deploy on Fridays")
    answer_all(owner)
    reply = ChatMessage.objects.get(role="assistant")
    assert reply.text == "Noted, I will keep it in mind."
    assert reply.confirmations == ["Remembered: Alice deploys on Fridays"]
    assert Fact.objects.get(user=owner).content == "Alice deploys on Fridays"
    shown = owner_client.get(MESSAGES_URL).json()["results"][-1]
    assert shown["confirmations"] == ["Remembered: Alice deploys on Fridays"]
    assert "[REMEMBER" not in shown["text"]


def test_provider_error_becomes_an_error_reply_and_the_queue_goes_on(owner, fake_llm) -> None:
    fake_llm.script(HttpError(400, "invalid_request_error", "prompt is broken"), TextReply(text="All good."))
    chat_message_send(user=owner, text="one")
    chat_message_send(user=owner, text="two")
    assert answer_all(owner) == 2
    first, second = ChatMessage.objects.filter(role="assistant").order_by("id")
    assert first.text.startswith("Error: ")
    assert "prompt is broken" in first.text
    assert first.status == ChatMessage.Status.ERROR
    assert second.text == "All good."
    assert second.status == ChatMessage.Status.DONE
    assert not ChatMessage.objects.filter(status__in=["queued", "processing"]).exists()
    # The failed exchange is not part of the history the model sees next.
    assert fake_llm.requests[1].message_texts == ["two"]


def test_a_busy_session_is_left_to_its_holder(owner, fake_llm) -> None:
    chat_message_send(user=owner, text="hi")
    session = ChatSession.objects.get()
    assert chat_queue_claim(session_id=session.pk) is not None
    assert chat_queue_claim(session_id=session.pk) is None
    assert chat_queue_process(session_id=session.pk) == 0
    assert fake_llm.requests == []
    assert ChatMessage.objects.get().status == ChatMessage.Status.QUEUED


def test_a_stalled_holder_is_replaced(owner, fake_llm) -> None:
    fake_llm.fallback = echo
    message, _ = chat_message_send(user=owner, text="stuck")
    # A dead holder's lease, run out.
    ChatSession.objects.update(lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(seconds=1))
    ChatMessage.objects.filter(pk=message.pk).update(status=ChatMessage.Status.PROCESSING)
    assert chat_queue_process(session_id=message.session_id) == 1
    assert message.reply.text == "answer to: stuck"
    assert ChatSession.objects.get().processing is False


# --- Sessions ------------------------------------------------------------------------------


def test_idle_session_past_the_ttl_starts_afresh(owner, settings) -> None:
    settings.CHAT_SESSION_TTL_HOURS = 2
    first, _ = chat_message_send(user=owner, text="old")
    ChatSession.objects.update(last_activity=timezone.now() - timedelta(hours=2, minutes=1))
    second, _ = chat_message_send(user=owner, text="new")
    assert second.session_id != first.session_id
    assert ChatSession.objects.get(pk=first.session_id).closed_at is not None


def test_session_within_the_ttl_is_resumed(owner, settings) -> None:
    settings.CHAT_SESSION_TTL_HOURS = 2
    first, _ = chat_message_send(user=owner, text="old")
    ChatSession.objects.update(last_activity=timezone.now() - timedelta(hours=1))
    second, _ = chat_message_send(user=owner, text="new")
    assert second.session_id == first.session_id


def test_expire_command_closes_idle_sessions(owner, other_user, settings) -> None:
    settings.CHAT_SESSION_TTL_HOURS = 1
    chat_message_send(user=owner, text="a")
    chat_message_send(user=other_user, text="b")
    ChatSession.objects.filter(user=owner).update(last_activity=timezone.now() - timedelta(hours=3))
    out = io.StringIO()
    call_command("chat_expire_sessions", stdout=out)
    assert "Closed 1 idle chat session." in out.getvalue()
    assert ChatSession.objects.get(user=owner).closed_at is not None
    assert ChatSession.objects.get(user=other_user).closed_at is None


def test_new_command_closes_the_session_without_a_model_call(owner_client, owner, fake_llm) -> None:
    send(owner_client, "before")
    old = ChatSession.objects.get()
    response = send(owner_client, "/new")
    assert response.status_code == 202
    assert response.json()["queue_position"] == 0
    old.refresh_from_db()
    assert old.closed_at is not None
    current = ChatSession.objects.get(closed_at__isnull=True)
    assert current.pk != old.pk
    shown = owner_client.get(MESSAGES_URL).json()["results"]
    assert [(m["role"], m["text"]) for m in shown] == [("user", "/new"), ("assistant", NEW_SESSION_STARTED)]
    assert len(owner_client.get(MESSAGES_URL, {"session": "all"}).json()["results"]) == 3
    assert fake_llm.requests == []


def test_corrupt_provider_session_id_reads_as_a_fresh_session(owner, caplog) -> None:
    first, _ = chat_message_send(user=owner, text="a")
    ChatSession.objects.update(provider_session_id="{not an id ]]\x07")
    with caplog.at_level(logging.WARNING, logger="chat.services"):
        session = chat_session_current(user=owner)
    assert session.pk != first.session_id
    assert "corrupt" in caplog.text


def test_session_pointing_at_someone_elses_project_reads_as_fresh(owner, project, other_project, caplog) -> None:
    first, _ = chat_message_send(user=owner, project=project, text="a")
    ChatSession.objects.filter(pk=first.session_id).update(project=other_project)
    with caplog.at_level(logging.WARNING, logger="chat.services"):
        session = chat_session_current(user=owner, project=other_project)
    assert session.pk != first.session_id
    assert ChatSession.objects.get(pk=first.session_id).closed_at is not None


# --- Attachments ---------------------------------------------------------------------------


def test_image_attachment_is_sent_to_the_model(owner_client, owner, fake_llm) -> None:
    fake_llm.fallback = echo
    upload = SimpleUploadedFile("shot.png", PNG, content_type="application/octet-stream")
    response = owner_client.post(MESSAGES_URL, {"text": "What is this?", "image": upload}, format="multipart")
    assert response.status_code == 202, response.content
    assert response.json()["message"]["has_image"] is True
    answer_all(owner)
    content = fake_llm.requests[0].body["messages"][-1]["content"]
    image = next(block for block in content if block["type"] == "image")
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}
    assert ChatMessage.objects.get(role="assistant").text == "answer to: What is this?"


def test_webp_is_recognised_by_its_bytes(owner_client) -> None:
    upload = SimpleUploadedFile("x.bin", WEBP)
    response = owner_client.post(MESSAGES_URL, {"text": "look", "image": upload}, format="multipart")
    assert response.status_code == 202
    assert ChatMessage.objects.get().attachment_type == "image/webp"


def test_attachment_that_is_not_an_image_is_refused(owner_client) -> None:
    upload = SimpleUploadedFile("fake.png", b"<svg>not really</svg>", content_type="image/png")
    response = owner_client.post(MESSAGES_URL, {"text": "look", "image": upload}, format="multipart")
    body = assert_error(response, 400, "invalid", IMAGE_TYPE_REFUSED)
    assert body["extra"]["fields"] == {"image": [IMAGE_TYPE_REFUSED]}
    assert not ChatMessage.objects.exists()


def test_attachment_over_the_size_limit_is_refused(owner_client, settings) -> None:
    settings.CHAT_ATTACHMENT_MAX_BYTES = 1024
    upload = SimpleUploadedFile("big.png", PNG + b"\x00" * 2000)
    response = owner_client.post(MESSAGES_URL, {"text": "look", "image": upload}, format="multipart")
    assert_error(response, 400, "invalid", IMAGE_TOO_LARGE.format(limit=1024))


# --- Reading -------------------------------------------------------------------------------


def test_history_pages_are_newest_first_and_oldest_first_within(owner_client, owner) -> None:
    for number in range(5):
        chat_message_send(user=owner, text=f"m{number}")
    first_page = owner_client.get(MESSAGES_URL, {"page_size": 2}).json()
    assert [m["text"] for m in first_page["results"]] == ["m3", "m4"]
    assert first_page["count"] == 5
    second_page = owner_client.get(MESSAGES_URL, {"page_size": 2, "page": 2}).json()
    assert [m["text"] for m in second_page["results"]] == ["m1", "m2"]


def test_history_list_query_count(owner_client, owner, django_assert_max_num_queries) -> None:
    for number in range(10):
        chat_message_send(user=owner, text=f"m{number}")
    with django_assert_max_num_queries(8):
        response = owner_client.get(MESSAGES_URL)
    assert len(response.json()["results"]) == 10


def test_bad_session_scope_is_a_400(owner_client) -> None:
    assert "session" in field_errors(owner_client.get(MESSAGES_URL, {"session": "yesterday"}))


def test_session_state(owner_client, owner) -> None:
    send(owner_client, "a")
    send(owner_client, "b")
    state = owner_client.get(SESSION_URL).json()
    assert state["session_id"] == ChatSession.objects.get().pk
    assert state["queue_size"] == 2
    assert state["processing"] is False
    assert state["message_count"] == 2


# --- Page and admin ------------------------------------------------------------------------


@pytest.fixture
def browser(client, owner):
    client.force_login(owner)
    return client


def test_chat_page_shows_the_conversation(browser, owner) -> None:
    chat_message_send(user=owner, text="Hello <b>there</b>")
    page = browser.get("/chat/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Hello &lt;b&gt;there&lt;/b&gt;" in html
    assert 'data-ws-path="/ws/chat"' in html
    assert "1 in the queue" in html
    assert "js/chat.js" in html


def test_chat_page_project_must_be_yours(browser, project, other_project) -> None:
    assert browser.get("/chat/", {"project": other_project.pk}).status_code == 404
    page = browser.get("/chat/", {"project": project.pk})
    assert page.status_code == 200
    assert f'data-ws-path="/ws/chat?project={project.pk}"' in page.content.decode()


def test_chat_page_form_posts_without_javascript(browser, owner, project) -> None:
    response = browser.post(f"/chat/?project={project.pk}", {"text": "From the form"})
    assert response.status_code == 302
    message = ChatMessage.objects.get()
    assert message.text == "From the form"
    assert message.session.project == project
    refused = browser.post("/chat/", {"text": "  "}, follow=True)
    assert EMPTY_TEXT in refused.content.decode()


def test_admin_shows_a_session_with_its_messages(client, owner, admin_user) -> None:
    message, _ = chat_message_send(user=owner, text="in the admin")
    client.force_login(admin_user)
    assert client.get("/admin/chat/chatsession/").status_code == 200
    page = client.get(f"/admin/chat/chatsession/{message.session_id}/change/")
    assert page.status_code == 200
    assert "in the admin" in page.content.decode()


def test_the_chat_opens_on_the_sites_project_says_how_to_remember_and_labels_its_box(browser, project) -> None:
    browser.get("/", {"project": project.pk})  # the board of that project: the site's current one
    html = browser.get("/chat/").content.decode()
    assert f'data-ws-path="/ws/chat?project={project.pk}"' in html
    assert f'<option value="{project.pk}" selected>' in html
    assert "[REMEMBER: …]" in html and "remember that" in html
    assert '<label for="chat-text"' in html and 'id="chat-text"' in html
    # No project is still a choice.
    assert 'data-ws-path="/ws/chat"' in browser.get("/chat/", {"project": ""}).content.decode()
