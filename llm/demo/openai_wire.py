"""OpenAI's Chat Completions on the wire, as the demo model speaks it.

A request to ``POST /v1/chat/completions`` is read as the Messages body the demo model
already answers (``messages_body``: system messages, function tools, assistant
``tool_calls`` and ``tool`` messages back into content blocks), and the demo's turn is
written back as Chat Completions: streamed, chunks of ``chat.completion.chunk`` as
``data:`` lines (no ``event:`` line), the first with the assistant's role, text deltas,
a tool call's ``id`` and name in its first delta and its ``arguments`` split over the
following ones (by ``index``), the ``finish_reason`` in the last choice chunk, then —
asked with ``stream_options.include_usage`` — one chunk with no choices and the
``usage``, then ``data: [DONE]``. Standard library only, like the rest of llm/demo.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from llm.demo.wire import Frame, JSONObject, Turn, chunks

CHAT_PATH = "/v1/chat/completions"
FINISH_REASONS = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}


def call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def error_body(status: int, message: str, error_type: str = "") -> JSONObject:
    """OpenAI's error shape (vLLM, LiteLLM and OpenRouter answer alike)."""
    kinds = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
    kind = error_type or kinds.get(status) or ("rate_limit_error" if status == 429 else "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# --- The request, read as a Messages body ----------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _user_blocks(content: Any) -> list[JSONObject]:
    if not isinstance(content, list):
        return [{"type": "text", "text": _text(content)}]
    blocks: list[JSONObject] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            media_type, _, data = url.removeprefix("data:").partition(";base64,")
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
    return blocks


def _assistant_blocks(message: JSONObject) -> list[JSONObject]:
    blocks: list[JSONObject] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": _text(message["content"])})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            arguments = {}
        blocks.append(
            {"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""), "input": arguments}
        )
    return blocks


def _tool_choice(choice: Any) -> JSONObject | None:
    if choice == "required":
        return {"type": "any"}
    if choice == "auto":
        return {"type": "auto"}
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "tool", "name": str((choice.get("function") or {}).get("name", ""))}
    return None


def messages_body(chat: JSONObject) -> JSONObject:
    """The Chat Completions body ``chat`` as the Messages body the demo model reads."""
    system: list[str] = []
    messages: list[JSONObject] = []

    def add(role: str, blocks: list[JSONObject]) -> None:
        # Consecutive messages of one role (tool results, then the user's text) are one.
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for message in chat.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "assistant":
            add("assistant", _assistant_blocks(message))
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id", ""),
                "content": _text(message.get("content")),
            }
            add("user", [result])
        else:
            add("user", _user_blocks(message.get("content")))
    tools = [
        {
            "name": (tool.get("function") or {}).get("name", ""),
            "description": (tool.get("function") or {}).get("description", ""),
            "input_schema": (tool.get("function") or {}).get("parameters") or {},
        }
        for tool in chat.get("tools") or []
        if isinstance(tool, dict)
    ]
    body: JSONObject = {
        "model": chat.get("model"),
        "max_tokens": chat.get("max_tokens") or chat.get("max_completion_tokens"),
        "system": "\n\n".join(system),
        "messages": messages,
        "stream": bool(chat.get("stream")),
    }
    if tools:
        body["tools"] = tools
        choice = _tool_choice(chat.get("tool_choice"))
        if choice:
            body["tool_choice"] = choice
    return body


# --- The reply -------------------------------------------------------------------------


def _usage(turn: Turn, cached_tokens: int) -> JSONObject:
    prompt = turn.input_tokens + cached_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": turn.output_tokens,
        "total_tokens": prompt + turn.output_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def data(payload: JSONObject | str) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


class ChunkWriter:
    """The ``chat.completion.chunk`` frames of one reply (one id, one creation time)."""

    def __init__(self, model: str) -> None:
        self.id = "chatcmpl-" + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = model

    def chunk(self, delta: JSONObject | None, finish: str | None = None, usage: JSONObject | None = None) -> bytes:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        payload: JSONObject = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": choices,
        }
        if usage is not None:
            payload["usage"] = usage
        return data(payload)

    def text(self, text: str, size: int, delay: float = 0.0) -> Iterator[Frame]:
        for piece in chunks(text, size):
            if delay:
                yield delay
            yield self.chunk({"content": piece})

    def tool_call(self, name: str, arguments: str, size: int, delay: float = 0.0, index: int = 0) -> Iterator[Frame]:
        first = {"index": index, "id": call_id(), "type": "function", "function": {"name": name, "arguments": ""}}
        yield self.chunk({"tool_calls": [first]})
        for piece in chunks(arguments, size):
            if delay:
                yield delay
            yield self.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})

    def end(self, turn: Turn, cached_tokens: int = 0) -> Iterator[Frame]:
        yield self.chunk({}, finish=FINISH_REASONS.get(turn.stop_reason, "stop"))
        yield self.chunk(None, usage=_usage(turn, cached_tokens))
        yield data("[DONE]")


def chat_stream(turn: Turn, *, cached_tokens: int = 0) -> Iterator[Frame]:
    """The whole streamed reply: role, text, the tool call's pieces, finish, usage, done."""
    writer = ChunkWriter(turn.model)
    yield writer.chunk({"role": "assistant", "content": ""})
    if turn.text:
        yield from writer.text(turn.text, turn.chunk_size, turn.chunk_delay)
    if turn.tool:
        yield from writer.tool_call(turn.tool.name, turn.tool.input_json, turn.chunk_size, turn.chunk_delay)
    yield from writer.end(turn, cached_tokens)


def chat_body(turn: Turn, *, cached_tokens: int = 0) -> JSONObject:
    """The same reply as one ``chat.completion`` body (a request without ``stream``)."""
    message: JSONObject = {"role": "assistant", "content": turn.text or None}
    if turn.tool:
        message["tool_calls"] = [
            {
                "id": call_id(),
                "type": "function",
                "function": {"name": turn.tool.name, "arguments": turn.tool.input_json},
            }
        ]
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": turn.model,
        "choices": [{"index": 0, "message": message, "finish_reason": FINISH_REASONS.get(turn.stop_reason, "stop")}],
        "usage": _usage(turn, cached_tokens),
    }
