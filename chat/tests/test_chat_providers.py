"""Which provider answers the assistant: the server's, or the one the session's project
chose (its own OpenAI-compatible endpoint and key included). The LLMs are the fake
Anthropic and Chat Completions servers."""

from __future__ import annotations

import pytest

from chat.models import ChatMessage, ChatSession
from chat.services import chat_message_send
from chat.worker import chat_queue_process
from core.workers import shutdown_requested
from projects.services import project_update
from tests.fake_openai import TextReply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _worker_not_stopping() -> None:
    shutdown_requested.clear()


def _answer(owner, project, text: str) -> str:
    chat_message_send(user=owner, project=project, text=text)
    session = ChatSession.objects.get(user=owner, project=project, closed_at__isnull=True)
    chat_queue_process(session_id=session.pk)
    return ChatMessage.objects.filter(session=session, role="assistant").latest("pk").text


def test_a_project_on_its_own_endpoint_is_answered_there_and_others_by_the_server(
    owner, project, fake_llm, fake_openai, settings
) -> None:
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    project_update(
        project=project,
        llm_provider="openai",
        llm_base_url=fake_openai.base_url,
        llm_api_key="sk-chat-project",
        llm_model="llama3.1:8b",
    )
    fake_openai.script(TextReply("From the project's model."))
    fake_llm.script(TextReply("From Claude."))

    assert _answer(owner, project, "Hello there") == "From the project's model."
    assert _answer(owner, None, "Hello again") == "From Claude."

    [asked] = fake_openai.chat_requests
    assert asked.wire_body["model"] == "llama3.1:8b"
    assert {key.lower(): value for key, value in asked.headers.items()}["authorization"] == "Bearer sk-chat-project"
    assert asked.wire_body["messages"][-1] == {"role": "user", "content": "Hello there"}
    [claude] = fake_llm.requests
    assert claude.body["model"] == settings.LLM_MODEL and claude.message_texts[-1] == "Hello again"


def test_the_server_default_openai_provider_answers_with_its_model(owner, fake_openai, settings) -> None:
    settings.LLM_PROVIDER = "openai"
    fake_openai.script(TextReply("Hi from gpt."))
    assert _answer(owner, None, "Hello") == "Hi from gpt."
    assert fake_openai.chat_requests[0].wire_body["model"] == "gpt-4.1"
