"""The chat through real workers and the real websocket: FIFO order under concurrent
sends, one holder at a time, and the live stream (owner only).

Embedded run (no REDIS_URL): the in-process worker. Production run (REDIS_URL set): a
separate ``celery -A config worker`` process on a queue of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.test import APIClient

from accounts.services import api_token_create
from chat import tasks as chat_tasks
from chat.models import ChatMessage, ChatSession
from chat.services import chat_message_send
from chat.worker import chat_queue_process
from core.workers import shutdown_requested
from tests.fake_anthropic import RecordedRequest, TextReply
from tests.sockets import open_socket
from tests.threads import DatabaseThread
from tests.workers import topology_worker as shared_topology_worker
from tests.workers import wait_until

from .test_chat import last_user_text

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _worker_not_stopping() -> None:
    # An embedded worker stopped by an earlier test leaves the process-wide stop flag
    # set; answering in this thread must not read it as its own shutdown.
    shutdown_requested.clear()


@contextmanager
def topology_worker(fake_llm, tmp_path: Path) -> Iterator[None]:
    env = {"ANTHROPIC_BASE_URL": fake_llm.url, "ANTHROPIC_API_KEY": "sk-ant-test-key"}
    with shared_topology_worker(tmp_path / "worker.log", concurrency=4, **env):
        yield


def test_messages_sent_concurrently_are_answered_in_order_one_at_a_time(owner, fake_llm, tmp_path) -> None:
    arrivals: list[tuple[float, str]] = []

    def echo(request: RecordedRequest) -> TextReply:
        arrivals.append((time.time(), last_user_text(request)))
        return TextReply(text=f"answer to: {last_user_text(request)}", chunk_size=4, chunk_delay=0.002)

    fake_llm.fallback = echo
    _, raw = api_token_create(user=owner, name="threads")
    errors: list[str] = []

    def post(number: int) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
        response = client.post("/api/chat/messages", {"text": f"message {number}"}, format="json")
        if response.status_code != 202:
            errors.append(response.content.decode())

    with topology_worker(fake_llm, tmp_path):
        threads = [DatabaseThread(target=post, args=(n,)) for n in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        wait_until(
            lambda: ChatMessage.objects.filter(role="assistant").count() == 10,
            60,
            lambda: f"{ChatMessage.objects.filter(role='assistant').count()} of 10 answered",
        )

    assert ChatSession.objects.count() == 1
    questions = list(ChatMessage.objects.filter(role="user").order_by("id"))
    replies = list(ChatMessage.objects.filter(role="assistant").order_by("id"))
    assert [r.reply_to_id for r in replies] == [q.pk for q in questions]
    assert [r.text for r in replies] == [f"answer to: {q.text}" for q in questions]
    assert all(r.status == "done" for r in replies) and all(q.status == "done" for q in questions)
    # One at a time: each call reached the model only after the previous reply was stored.
    assert [text for _, text in arrivals] == [q.text for q in questions]
    for (arrived, _), previous in zip(arrivals[1:], replies[:-1], strict=True):
        assert arrived >= previous.created_at.timestamp() - 0.05
    assert ChatSession.objects.get().processing is False


def test_concurrent_task_invocations_leave_one_holder(owner, fake_llm, monkeypatch) -> None:
    monkeypatch.setattr(chat_tasks.chat_answer_queue, "delay", lambda *args: None)
    fake_llm.fallback = lambda request: TextReply(text=f"re {last_user_text(request)}", chunk_delay=0.01)
    for number in range(4):
        message, _ = chat_message_send(user=owner, text=f"q{number}")
    results: list[int] = []

    def run() -> None:
        results.append(chat_tasks.chat_answer_queue(message.session_id))

    threads = [DatabaseThread(target=run) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [0, 0, 0, 0, 4]
    assert len(fake_llm.requests) == 4
    replies = ChatMessage.objects.filter(role="assistant").order_by("id")
    assert [r.text for r in replies] == ["re q0", "re q1", "re q2", "re q3"]


# --- Websocket -----------------------------------------------------------------------------


def _token_header(user) -> tuple[bytes, bytes]:
    _, raw = api_token_create(user=user, name="ws")
    return (b"authorization", f"Token {raw}".encode())


async def _connect(path: str, *headers: tuple[bytes, bytes]) -> tuple[WebsocketCommunicator, bool, int | None]:
    return await open_socket(path, *headers)


def test_owner_socket_streams_the_reply_and_others_see_none_of_it(owner, other_user, fake_llm, monkeypatch) -> None:
    # This test answers in its own thread: nothing goes to a broker.
    monkeypatch.setattr(chat_tasks.chat_answer_queue, "delay", lambda *args: None)
    fake_llm.script(TextReply(text="Streaming works fine. [REMEMBER: sockets are fun]", chunk_size=5))
    owner_header, other_header = _token_header(owner), _token_header(other_user)

    async def scenario() -> tuple[list[dict], bool]:
        mine, connected, _ = await _connect("/ws/chat", owner_header)
        assert connected
        theirs, connected, _ = await _connect("/ws/chat", other_header)
        assert connected
        message, _ = await database_sync_to_async(chat_message_send)(user=owner, text="stream please")
        await database_sync_to_async(chat_queue_process)(session_id=message.session_id)
        received: list[dict] = []
        while True:
            event = await mine.receive_json_from(timeout=3)
            received.append(event)
            if event["type"] == "chat-message" and event["data"]["message"]["role"] == "assistant":
                break
        nothing = await theirs.receive_nothing(timeout=0.3)
        await mine.disconnect()
        await theirs.disconnect()
        return received, nothing

    received, other_saw_nothing = async_to_sync(scenario)()
    assert other_saw_nothing
    types = [event["type"] for event in received]
    assert types[0] == "chat-message"  # the question, queued
    assert "chat-queue" in types
    chunks = "".join(e["data"]["chunk"] for e in received if e["type"] == "chat-chunk")
    assert chunks == "Streaming works fine. [REMEMBER: sockets are fun]"
    question_id = received[0]["data"]["message"]["id"]
    assert {e["data"]["message_id"] for e in received if e["type"] == "chat-chunk"} == {question_id}
    reply = received[-1]["data"]["message"]
    assert reply["text"] == "Streaming works fine."
    assert reply["confirmations"] == ["Remembered: sockets are fun"]
    assert reply["reply_to"] == question_id


def test_socket_refuses_anonymous_and_someone_elses_project(owner, other_user, project) -> None:
    other_header = _token_header(other_user)

    async def scenario() -> list[tuple[bool, int | None]]:
        outcomes = []
        for path, headers in (
            ("/ws/chat", ()),
            ("/ws/chat", ((b"authorization", b"Token nonsense"),)),
            (f"/ws/chat?project={project.pk}", (other_header,)),
            ("/ws/chat?project=abc", (other_header,)),
        ):
            communicator, connected, code = await _connect(path, *headers)
            outcomes.append((connected, code))
            await communicator.disconnect()
        return outcomes

    outcomes = async_to_sync(scenario)()
    assert outcomes == [(False, 4401), (False, 4401), (False, 4404), (False, 4404)]
