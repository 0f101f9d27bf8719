"""The session's lease: an answer that takes longer than the lease (a provider that sends
nothing until it is done, like the Claude CLI) is bought once however often another
worker tries the session, and a holder that lost the session and finishes late neither
stores its answer nor clears its successor's claim."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from chat import tasks as chat_tasks
from chat.models import ChatMessage, ChatSession
from chat.services import chat_message_send, chat_message_take_next, chat_queue_claim, chat_queue_release
from chat.worker import chat_message_answer, chat_queue_process
from core import leases as core_leases
from core.workers import shutdown_requested
from llm.providers.base import Cancelled, LLMRequest, LLMResult
from tests.workers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 1


@pytest.fixture(autouse=True)
def _short_lease(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.CHAT_LEASE_SECONDS = LEASE_SECONDS
    # Answering runs in the test's threads: nothing goes to a broker.
    monkeypatch.setattr(chat_tasks.chat_answer_queue, "delay", lambda *args: None)
    shutdown_requested.clear()


class SilentProvider:
    """Sends nothing until its whole answer, ``seconds`` later; meanwhile it looks at
    ``should_cancel`` as the Claude CLI provider does while it waits for the CLI."""

    label = "silent"
    supports_tools = False
    edits_worktree = False

    def __init__(self, seconds: float, text: str = "the slow answer", *, stalled: bool = False) -> None:
        self.seconds = seconds
        self.text = text
        self.stalled = stalled  # looks at nothing: a paused VM
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def complete(self, request: LLMRequest, *, on_chunk: Any, should_cancel: Any) -> LLMResult:
        self.calls += 1
        self.started.set()
        until = time.monotonic() + self.seconds
        while time.monotonic() < until and not self.release.is_set():
            if not self.stalled and should_cancel():
                raise Cancelled()
            time.sleep(0.05)
        return LLMResult(text=self.text, tool_input=None, raw_tool_input="", input_tokens=3, output_tokens=4, model="m")


def _in_thread(target: Any) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_an_answer_slower_than_the_lease_is_bought_once_while_another_worker_tries_the_session(owner) -> None:
    message, _ = chat_message_send(user=owner, text="take your time")
    provider = SilentProvider(seconds=LEASE_SECONDS * 3.5)
    answered: list[int] = []
    first = _in_thread(lambda: answered.append(chat_queue_process(session_id=message.session_id, provider=provider)))
    assert provider.started.wait(10)
    began = time.monotonic()

    # Another worker (the sweep, a new message's task) tries the session again and again
    # while the answer is being bought, long past the lease's own length.
    tries = []
    while first.is_alive():
        tries.append(chat_queue_process(session_id=message.session_id, provider=provider))
        tried_until = time.monotonic()
        time.sleep(0.1)
    first.join(10)

    assert tried_until - began > LEASE_SECONDS * 2, "the other worker tried long past the lease's length"
    assert provider.calls == 1, "the answer was bought once"
    assert answered == [1] and set(tries) == {0}
    replies = list(ChatMessage.objects.filter(role=ChatMessage.Role.ASSISTANT))
    assert [reply.text for reply in replies] == ["the slow answer"]
    assert ChatMessage.objects.get(pk=message.pk).status == ChatMessage.Status.DONE
    session = ChatSession.objects.get()
    assert not session.processing and session.lease_owner == ""


def test_a_holder_that_lost_the_session_and_finishes_late_leaves_its_successors_claim(
    owner, monkeypatch: pytest.MonkeyPatch
) -> None:
    message, _ = chat_message_send(user=owner, text="are you there?")
    stalled = SilentProvider(seconds=60, text="a late answer", stalled=True)
    stalled_thread: list[threading.Thread] = []
    renew = core_leases.renewer.add

    def renew_but_the_stalled(lease: core_leases.Lease) -> None:
        # The first worker stalls (a paused VM): its lease is not renewed.
        if threading.current_thread() not in stalled_thread:
            renew(lease)

    monkeypatch.setattr(core_leases.renewer, "add", renew_but_the_stalled)
    answered: list[int] = []
    first = threading.Thread(
        target=lambda: answered.append(chat_queue_process(session_id=message.session_id, provider=stalled))
    )
    stalled_thread.append(first)
    first.start()
    try:
        assert stalled.started.wait(10)
        wait_until(
            lambda: ChatSession.objects.filter(pk=message.session_id).get().lease_is_held is False,
            timeout=10,
            why=lambda: "the stalled worker's lease did not run out",
        )
        successor = chat_queue_claim(session_id=message.session_id)
        assert successor is not None, "taken over once the lease ran out"
        assert ChatMessage.objects.get(pk=message.pk).status == ChatMessage.Status.QUEUED
    finally:
        # The stalled worker wakes up and its answer comes back, late.
        stalled.release.set()
        first.join(10)
    try:
        assert answered == [0]
        assert not ChatMessage.objects.filter(role=ChatMessage.Role.ASSISTANT).exists(), "its late answer is dropped"
        session = ChatSession.objects.get()
        assert session.lease_owner == successor.token, "its release left the successor's claim"
        assert session.processing
        assert chat_queue_claim(session_id=message.session_id) is None

        # The successor answers the message, once.
        taken = chat_message_take_next(session_id=message.session_id, held_by=successor.token)
        assert taken is not None and taken.pk == message.pk
        reply = chat_message_answer(taken, lease=successor, provider=SilentProvider(seconds=0, text="on time"))
        assert reply is not None and reply.text == "on time"
    finally:
        chat_queue_release(lease=successor)
    assert [reply.text for reply in ChatMessage.objects.filter(role=ChatMessage.Role.ASSISTANT)] == ["on time"]
    assert not ChatSession.objects.get().processing
