"""The Messages API's wire format, as the demo model writes it.

A streamed answer is Server-Sent Events, and the SDK is strict about them: every frame has
an ``event:`` line; ``message_start`` comes first, then the content blocks (each
``content_block_start``, its deltas, ``content_block_stop``), then ``message_delta``
with the stop reason and the cumulative output tokens, then ``message_stop``. A
non-streamed answer is the same message as one JSON body.

A ``Frame`` is either bytes to write or a float: seconds to wait before the next one
(the demo model types at a readable pace).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Frame = bytes | float

JSONObject = dict[str, Any]


def sse(event: str, data: JSONObject) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def chunks(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), max(1, size)):
        yield text[start : start + size]


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def message_id() -> str:
    return "msg_" + uuid.uuid4().hex[:20]


def tool_use_id() -> str:
    return "toolu_" + uuid.uuid4().hex[:20]


def request_id() -> str:
    return "req_demo_" + uuid.uuid4().hex[:12]


def error_body(error_type: str, message: str) -> JSONObject:
    return {"type": "error", "error": {"type": error_type, "message": message}}


@dataclass(frozen=True)
class ToolUse:
    """A ``tool_use`` block. ``input_json`` is the input as the stream carries it."""

    name: str
    input_json: str


@dataclass(frozen=True)
class Turn:
    """One assistant message: optional text, then an optional tool call."""

    model: str
    input_tokens: int
    output_tokens: int
    text: str = ""
    tool: ToolUse | None = None
    chunk_size: int = 16
    chunk_delay: float = 0.0
    # Prompt caching: None when the request had no breakpoints (then the usage does not
    # mention the cache at all), else the tokens written to and read from the cache.
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None

    @property
    def cache_usage(self) -> JSONObject:
        if self.cache_creation_input_tokens is None and self.cache_read_input_tokens is None:
            return {}
        return {
            "cache_creation_input_tokens": self.cache_creation_input_tokens or 0,
            "cache_read_input_tokens": self.cache_read_input_tokens or 0,
        }

    # Why the turn ended when not the usual (e.g. "max_tokens": cut off at the limit).
    stop: str | None = None
    # Context editing: what the request's edits cleared (``applied_edits``); None when it
    # asked for none.
    context_management: JSONObject | None = None

    @property
    def stop_reason(self) -> str:
        if self.stop:
            return self.stop
        return "tool_use" if self.tool else "end_turn"


# --- Streamed frames -------------------------------------------------------------------


def message_start(model: str, input_tokens: int, cache_usage: JSONObject | None = None) -> bytes:
    return sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id(),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, **(cache_usage or {}), "output_tokens": 1},
            },
        },
    )


def ping() -> bytes:
    return sse("ping", {"type": "ping"})


def text_block_start(index: int) -> bytes:
    return sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
    )


def text_delta(index: int, text: str) -> bytes:
    return sse(
        "content_block_delta",
        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}},
    )


def tool_use_block_start(index: int, name: str) -> bytes:
    return sse(
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "tool_use", "id": tool_use_id(), "name": name, "input": {}},
        },
    )


def input_json_delta(index: int, partial_json: str) -> bytes:
    return sse(
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": partial_json},
        },
    )


def content_block_stop(index: int) -> bytes:
    return sse("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(
    stop_reason: str,
    output_tokens: int,
    cache_usage: JSONObject | None = None,
    context_management: JSONObject | None = None,
) -> bytes:
    """The closing usage is cumulative: the cache counts again (as the API sends them).
    What context editing cleared comes with it (the beta's ``context_management``)."""
    event: JSONObject = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {**(cache_usage or {}), "output_tokens": output_tokens},
    }
    if context_management is not None:
        event["context_management"] = context_management
    return sse("message_delta", event)


def message_stop() -> bytes:
    return sse("message_stop", {"type": "message_stop"})


def error(error_type: str, message: str) -> bytes:
    """An ``event: error`` frame: the stream fails after it started."""
    return sse("error", error_body(error_type, message))


def text_block(index: int, text: str, chunk_size: int, delay: float = 0.0) -> Iterator[Frame]:
    yield text_block_start(index)
    for piece in chunks(text, chunk_size):
        if delay:
            yield delay
        yield text_delta(index, piece)
    yield content_block_stop(index)


def tool_use_block(index: int, tool: ToolUse, chunk_size: int, delay: float = 0.0) -> Iterator[Frame]:
    yield tool_use_block_start(index, tool.name)
    for piece in chunks(tool.input_json, chunk_size):
        if delay:
            yield delay
        yield input_json_delta(index, piece)
    yield content_block_stop(index)


def stream(turn: Turn) -> Iterator[Frame]:
    """The whole streamed message, ``message_start`` to ``message_stop``."""
    yield message_start(turn.model, turn.input_tokens, turn.cache_usage)
    yield ping()
    index = 0
    if turn.text:
        yield from text_block(index, turn.text, turn.chunk_size, turn.chunk_delay)
        index += 1
    if turn.tool:
        yield from tool_use_block(index, turn.tool, turn.chunk_size, turn.chunk_delay)
    yield message_delta(turn.stop_reason, turn.output_tokens, turn.cache_usage, turn.context_management)
    yield message_stop()


# --- Non-streamed body -----------------------------------------------------------------


def message_body(turn: Turn) -> JSONObject:
    content: list[JSONObject] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    if turn.tool:
        content.append(
            {"type": "tool_use", "id": tool_use_id(), "name": turn.tool.name, "input": json.loads(turn.tool.input_json)}
        )
    body: JSONObject = {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": content,
        "stop_reason": turn.stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, **turn.cache_usage, "output_tokens": turn.output_tokens},
    }
    if turn.context_management is not None:
        body["context_management"] = turn.context_management
    return body
