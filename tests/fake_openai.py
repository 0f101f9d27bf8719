"""The fake OpenAI Chat Completions API of the tests: the fake Anthropic server
(tests/fake_anthropic.py) answering ``POST /v1/chat/completions`` in OpenAI's shape.

The production code reaches it through the openai SDK's ``base_url`` (``server.url +
"/v1"``), exactly as it reaches any OpenAI-compatible endpoint. Replies are scripted with
the same objects (``TextReply``, ``ToolReply``, ``RawToolInputReply`` for broken tool
arguments, ``HttpError`` with headers such as ``retry-after``, ``MidStreamError``, ``Held``,
``Chosen``); each request is recorded as the demo model reads it (``RecordedRequest``,
its ``body`` in the Messages shape) with the Chat Completions body as sent in
``wire_body``. Streams carry ``tool_calls`` deltas split over several chunks and the usage
in a last chunk without choices; ``cached_tokens`` sets what that usage reports as
``prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

from collections.abc import Iterator

from llm.demo import openai_wire, wire
from llm.demo.openai_wire import ChunkWriter
from tests.fake_anthropic import (
    EDITOR,
    MID_STREAM_TEXT,
    Chosen,
    FakeAnthropicServer,
    Held,
    HttpError,
    MidStreamError,
    Paced,
    RawToolInputReply,
    RecordedRequest,
    Reply,
    TextReply,
    ToolReply,
    _FakeHandler,
)

__all__ = [
    "EDITOR",
    "Chosen",
    "FakeOpenAIServer",
    "Held",
    "HttpError",
    "MidStreamError",
    "RawToolInputReply",
    "RecordedRequest",
    "Reply",
    "TextReply",
    "ToolReply",
]


class _FakeOpenAIHandler(_FakeHandler):
    server: FakeOpenAIServer

    def answer(self, request: RecordedRequest) -> None:
        if not request.chat_completions:
            super().answer(request)
            return
        with self.server._lock:
            upcoming = self.server._replies[0] if self.server._replies else None
        if isinstance(upcoming, (RawToolInputReply, MidStreamError, Paced)) and request.stream:
            reply = self.server.next_reply(request)
            self.send_stream(self._chat_fault(request, reply))
            return
        super().answer(request)

    def _chat_fault(self, request: RecordedRequest, reply: Reply) -> Iterator[wire.Frame]:
        turn = self.make_turn(request)
        writer = ChunkWriter(turn.model)
        yield writer.chunk({"role": "assistant", "content": ""})
        if isinstance(reply, RawToolInputReply):
            name = reply.name or request.answer_tool or "tool"
            yield from writer.tool_call(name, reply.partial_json, 24)
            yield from writer.end(
                wire.Turn(
                    model=turn.model, input_tokens=turn.input_tokens, output_tokens=8, tool=wire.ToolUse(name, "")
                )
            )
        elif isinstance(reply, MidStreamError):
            for sent, piece in enumerate(wire.chunks(MID_STREAM_TEXT, 16)):
                if sent >= reply.after_chunks:
                    break
                yield writer.chunk({"content": piece})
            # As OpenAI's servers do: an error object where a chunk was due.
            yield openai_wire.data(openai_wire.error_body(500, reply.message, reply.error_type))
        elif isinstance(reply, Paced):
            for _ in range(reply.tokens):
                yield 1.0 / reply.tokens_per_second
                yield writer.chunk({"content": reply.text})
            yield from writer.end(turn)


class FakeOpenAIServer(FakeAnthropicServer):
    """Start with ``with FakeOpenAIServer() as server:``; point the SDK at ``server.base_url``."""

    handler_class = _FakeOpenAIHandler
    model_name = "gpt-fake"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cached_tokens = 0
        super().__init__(host, port)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def chat_cached_tokens(self, request: RecordedRequest) -> int:
        return self.cached_tokens

    def reset(self) -> None:
        super().reset()
        self.cached_tokens = 0

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The requests that came through Chat Completions."""
        with self._lock:
            return [request for request in self.requests if request.chat_completions]
