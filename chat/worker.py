"""Answering a chat session's queue: one holder, oldest message first, one at a time.

The model call streams outside any database transaction (it can take minutes); chunks
go to the user's chat pages as they come, coalesced. The session's lease is renewed by the
process's renewer meanwhile (core/leases.py), whether the provider streams or sends its
whole answer at the end; a call whose worker lost the lease is cancelled and its answer,
if it came anyway, is not stored. A provider failure becomes an
assistant reply starting "Error: " and the queue goes on with the next message.
"""

from __future__ import annotations

import base64
import logging
import time
from typing import Any

from django.conf import settings
from django.db import transaction

from chat.events import ChatChunk, chat_send_now
from chat.models import ChatMessage
from chat.selectors import chat_history_for_prompt
from chat.services import (
    ERROR_PREFIX,
    ChatLease,
    ChatLeaseLost,
    chat_message_requeue,
    chat_message_take_next,
    chat_queue_claim,
    chat_queue_release,
    chat_reply_save,
)
from core.crypto import decrypt_secret
from core.workers import shutdown_requested
from llm.providers import provider_default_model, provider_for
from llm.providers.base import Cancelled, LLMRequest, Provider, ProviderError
from memory.selectors.facts import memory_prompt_context, memory_system_instructions
from memory.services.facts import markers_apply
from projects.selectors import ProjectLlm, project_llm

logger = logging.getLogger(__name__)

ASSISTANT_INSTRUCTIONS = (
    "You are the AutoCoder assistant. You help the user plan and discuss their software "
    "tasks and projects. Answer clearly and concisely."
)
CHUNK_FLUSH_SECONDS = 0.05
CHAT_MAX_TOKENS = 4096


def chat_system_prompt(message: ChatMessage) -> str:
    session = message.session
    parts = [
        ASSISTANT_INSTRUCTIONS,
        memory_system_instructions(),
        memory_prompt_context(user=session.user, project=session.project),
    ]
    if session.project is not None:
        parts.append(f"The conversation is about the project {session.project.name!r}.")
    return "\n\n".join(part.strip() for part in parts if part and part.strip())


def _user_content(message: ChatMessage) -> Any:
    if not message.attachment:
        return message.text
    return [
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": message.attachment_type,
                "data": base64.b64encode(bytes(message.attachment)).decode("ascii"),
            },
        },
        {"type": "text", "text": message.text},
    ]


def _project_llm(message: ChatMessage) -> ProjectLlm | None:
    """The provider the session's project chose for its agents, if it chose one."""
    project = message.session.project
    chosen = project_llm(project=project) if project is not None else None
    return chosen if chosen is not None and chosen.provider else None


def chat_provider(message: ChatMessage) -> Provider:
    """Who answers: the session's project's own provider (an OpenAI-compatible endpoint
    and key included) where it chose one, else the server's."""
    chosen = _project_llm(message)
    if chosen is None:
        return provider_for()
    return provider_for(
        name=chosen.provider,
        model=chosen.model,
        api_key=decrypt_secret(chosen.api_key_encrypted),
        base_url=chosen.base_url,
    )


def chat_model(message: ChatMessage) -> str:
    chosen = _project_llm(message)
    if chosen is None:
        return provider_default_model()
    return chosen.model or provider_default_model(chosen.provider)


def chat_request(message: ChatMessage) -> LLMRequest:
    """The session's previous answered exchanges (bounded) plus the new message."""
    history = [{"role": m.role, "content": m.text} for m in chat_history_for_prompt(message=message)]
    return LLMRequest(
        system=chat_system_prompt(message),
        messages=[*history, {"role": "user", "content": _user_content(message)}],
        model=chat_model(message),
        max_tokens=min(settings.LLM_MAX_TOKENS, CHAT_MAX_TOKENS),
        resume_session=message.session.provider_session_id,
    )


class _ChunkStream:
    """Coalesces chunks into at most one ``chat-chunk`` per CHUNK_FLUSH_SECONDS."""

    def __init__(self, message: ChatMessage) -> None:
        self.message = message
        self.buffer: list[str] = []
        self.last_flush = 0.0

    def write(self, chunk: str) -> None:
        if not chunk:
            return
        self.buffer.append(chunk)
        now = time.monotonic()
        if now - self.last_flush >= CHUNK_FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        chunk = "".join(self.buffer)
        self.buffer.clear()
        self.last_flush = time.monotonic()
        chat_send_now(
            user_id=self.message.session.user_id,
            project_id=self.message.session.project_id,
            event=ChatChunk(session_id=self.message.session_id, message_id=self.message.pk, chunk=chunk),
        )


def chat_message_answer(
    message: ChatMessage, *, lease: ChatLease, provider: Provider | None = None
) -> ChatMessage | None:
    """Answer one message taken from the queue under ``lease``. None: the worker is
    stopping (the message went back to the queue) or lost the session (its new holder
    answers the message)."""
    try:
        return _answer(message, lease=lease, provider=provider)
    except ChatLeaseLost:
        logger.warning("Chat message %s: the session's lease was lost meanwhile; its answer is dropped", message.pk)
        return None


def _answer(message: ChatMessage, *, lease: ChatLease, provider: Provider | None) -> ChatMessage | None:
    session = message.session
    stream = _ChunkStream(message)

    def stop() -> bool:
        return shutdown_requested.is_set() or not lease.check()

    try:
        request = chat_request(message)
        result = (provider or chat_provider(message)).complete(request, on_chunk=stream.write, should_cancel=stop)
    except Cancelled:
        chat_message_requeue(message=message, held_by=lease.token)
        return None
    except ProviderError as exc:
        stream.flush()
        return chat_reply_save(message=message, held_by=lease.token, text=ERROR_PREFIX + exc.message, error=True)
    except Exception as exc:
        # A bug must not stop the queue behind this message.
        logger.exception("Chat message %s could not be answered", message.pk)
        return chat_reply_save(
            message=message, held_by=lease.token, text=f"{ERROR_PREFIX}Something went wrong: {exc}", error=True
        )
    stream.flush()
    # The markers' facts and goals and the reply that confirms them are stored together.
    with transaction.atomic():
        shown, confirmations = markers_apply(user=session.user, project=session.project, text=result.text)
        return chat_reply_save(
            message=message,
            held_by=lease.token,
            text=shown,
            confirmations=confirmations,
            # Cached input included: the assistant's replies have one input count.
            input_tokens=result.all_input_tokens,
            output_tokens=result.output_tokens,
            provider_session_id=str(result.extra.get("session_id") or ""),
        )


def chat_queue_process(*, session_id: int, provider: Provider | None = None) -> int:
    """Answer the session's queue if no one else is; returns how many were answered."""
    answered = 0
    while (lease := chat_queue_claim(session_id=session_id)) is not None:
        try:
            while not shutdown_requested.is_set():
                message = chat_message_take_next(session_id=session_id, held_by=lease.token)
                if message is None:
                    break
                if chat_message_answer(message, lease=lease, provider=provider) is None:
                    break
                answered += 1
        finally:
            chat_queue_release(lease=lease)
        # A message queued just before the release saw the session busy and left it to
        # us: look again (claiming anew) so that it is not stranded.
        if (
            shutdown_requested.is_set()
            or not ChatMessage.objects.filter(session_id=session_id, status=ChatMessage.Status.QUEUED).exists()
        ):
            break
    return answered
