"""The fake Anthropic Messages API of the tests: the demo model's server (llm.demo),
scriptable reply by reply, with faults and every request recorded.

The production code reaches it through the SDK's ``base_url``, exactly as it reaches
Anthropic. Tests script it (``server.script(...)``) and inject faults; when the script
is empty it answers as the demo model does (``llm.demo.default_reply``), like a small,
well-behaved model. The wire format is llm.demo.wire's.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from llm.demo import wire
from llm.demo.model import DEMO_MODEL_LABEL, TextReply, ToolReply, default_reply
from llm.demo.model import MessagesRequest as RecordedRequest
from llm.demo.server import DemoHandler, DemoModelServer, min_cacheable_tokens

__all__ = [
    "DEMO_MODEL_LABEL",
    "EDITOR",
    "Chosen",
    "FakeAnthropicServer",
    "Hang",
    "Held",
    "HttpError",
    "MidStreamError",
    "Paced",
    "RawToolInputReply",
    "RecordedRequest",
    "Reply",
    "TextReply",
    "ToolReply",
    "coder_creates",
    "coder_replaces",
    "default_reply",
]


# --- Replies only a test scripts (ToolReply and TextReply are the demo model's) ---------


@dataclass
class RawToolInputReply:
    """Tool input that is not valid JSON at all (a broken model)."""

    partial_json: str
    name: str | None = None


@dataclass
class HttpError:
    status: int
    error_type: str
    message: str = "Scripted failure."
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class MidStreamError:
    """Starts a normal streamed reply, then sends an ``event: error`` frame."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    after_chunks: int = 2


@dataclass
class Hang:
    """Accept the request and say nothing for ``seconds`` (then close)."""

    seconds: float


@dataclass
class Held:
    """``reply``, sent only once the test sets ``release``: the request waits meanwhile, so
    a test can look at the run mid-phase without racing it. Never set, it is sent after
    ``timeout`` seconds (a failing test does not leave the run hanging)."""

    reply: ToolReply | TextReply
    release: threading.Event = field(default_factory=threading.Event)
    timeout: float = 60.0


@dataclass
class Paced:
    """``reply``, its text streamed at a model's pace: ``tokens`` text deltas, one every
    1/``tokens_per_second`` seconds on a fixed schedule (a slow write does not slow the
    rest), then the reply's tool call at once. With ``stamped`` each delta is the
    wall-clock time it is written (``STAMP``), so whoever shows it can tell how long the
    token took to reach them (bench/bench_concurrency.py); otherwise ``text`` over again."""

    reply: ToolReply | TextReply
    tokens: int = 500
    tokens_per_second: float = 50.0
    stamped: bool = False
    text: str = "token "


#: A stamped token: ``[t=<seconds since the epoch>]`` (time.time(), microseconds).
STAMP = "[t={:.6f}]"


@dataclass
class Chosen:
    """The reply ``choose`` picks for the request it answers: a model whose next move
    depends on what it was told (a person's message, say)."""

    choose: Callable[[RecordedRequest], ToolReply | TextReply]


Reply = ToolReply | TextReply | RawToolInputReply | HttpError | MidStreamError | Hang | Held | Paced | Chosen

EDITOR = "str_replace_based_edit_tool"


def coder_creates(path: str, text: str, summary: str = "Created it.") -> tuple[ToolReply, TextReply]:
    """A Coder's whole editing conversation: it creates one file, then says it is done."""
    create = ToolReply(name=EDITOR, input={"command": "create", "path": path, "file_text": text})
    return create, TextReply(summary)


def coder_replaces(path: str, old: str, new: str, summary: str = "Changed it.") -> tuple[ToolReply, TextReply]:
    """A Coder's whole editing conversation: one exact replacement, then done."""
    replace = ToolReply(name=EDITOR, input={"command": "str_replace", "path": path, "old_str": old, "new_str": new})
    return replace, TextReply(summary)


MID_STREAM_TEXT = "Starting to think about it. " * 4


class _FakeHandler(DemoHandler):
    server: FakeAnthropicServer

    def answer(self, request: RecordedRequest) -> None:
        reply = self.server.next_reply(request)
        if isinstance(reply, Chosen):
            reply = reply.choose(request)
        if isinstance(reply, Held):
            reply.release.wait(reply.timeout)
            reply = reply.reply
        if isinstance(reply, (ToolReply, RawToolInputReply)) and not reply.name and not request.answer_tool:
            # A request that answers with no tool of its own (the Coder's editing
            # conversation): a nameless scripted tool call is a mistake in the test.
            message = f"The test scripted {reply!r} without a tool name for a request that has no answer tool."
            self.server.script_errors.append(message)
            self.send_api_error(400, "invalid_request_error", message)
            return
        if isinstance(reply, Paced):
            if request.stream:
                self.send_stream(self._paced(request, reply))
            else:
                self.respond(request, reply.reply)
        elif isinstance(reply, Hang):
            time.sleep(reply.seconds)
            self.close_connection = True
        elif isinstance(reply, HttpError):
            self.send_api_error(reply.status, reply.error_type, reply.message, reply.headers)
        elif isinstance(reply, (ToolReply, TextReply)):
            self.respond(request, reply)
        elif not request.stream:
            # Neither fault has a non-streamed form: an empty message.
            self.send_json(200, wire.message_body(self.make_turn(request)))
        elif isinstance(reply, RawToolInputReply):
            tool = wire.ToolUse(name=reply.name or request.answer_call_name or "tool", input_json=reply.partial_json)
            self.send_stream(wire.stream(self.make_turn(request, tool=tool, chunk_size=24)))
        else:
            self.send_stream(self._mid_stream_error(request, reply))

    def _paced(self, request: RecordedRequest, paced: Paced) -> Iterator[wire.Frame]:
        turn = self.turn(request, paced.reply)
        yield wire.message_start(turn.model, turn.input_tokens, turn.cache_usage)
        yield wire.ping()
        yield wire.text_block_start(0)
        interval = 1.0 / paced.tokens_per_second
        due = time.monotonic()
        for _ in range(paced.tokens):
            due += interval
            pause = due - time.monotonic()
            if pause > 0:
                yield pause  # the frame after it is made once the pause is over
            yield wire.text_delta(0, STAMP.format(time.time()) if paced.stamped else paced.text)
        yield wire.content_block_stop(0)
        if turn.tool:
            yield from wire.tool_use_block(1, turn.tool, turn.chunk_size)
        yield wire.message_delta(
            turn.stop_reason, turn.output_tokens + paced.tokens, turn.cache_usage, turn.context_management
        )
        yield wire.message_stop()

    def _mid_stream_error(self, request: RecordedRequest, reply: MidStreamError) -> Iterator[wire.Frame]:
        turn = self.make_turn(request)
        yield wire.message_start(turn.model, turn.input_tokens, turn.cache_usage)
        yield wire.ping()
        yield wire.text_block_start(0)
        for sent, piece in enumerate(wire.chunks(MID_STREAM_TEXT, 16)):
            if sent >= reply.after_chunks:
                yield wire.error(reply.error_type, reply.message)
                return
            yield wire.text_delta(0, piece)
        yield wire.content_block_stop(0)
        yield wire.error(reply.error_type, reply.message)


class FakeAnthropicServer(DemoModelServer):
    """Start with ``with FakeAnthropicServer() as server:``; point the SDK at ``server.url``."""

    handler_class = _FakeHandler
    model_name = "claude-fake"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.script_errors: list[str] = []
        # Which requests take the scripted replies; the others (an agent's side requests:
        # a title, a quota check) go to the fallback at once.
        self.scripted_for: Callable[[RecordedRequest], bool] = _every_request
        super().__init__(host, port)

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request (``scripted_for``) takes the next one, then the
        fallback answers."""
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.requests.clear()
            self.script_errors.clear()
            self.fallback = default_reply
            self.scripted_for = _every_request
        with self._cache_lock:
            self.cached_prefixes.clear()
            self.clock = time.monotonic
            self.min_cacheable_tokens = min_cacheable_tokens

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._replies and self.scripted_for(request):
                return self._replies.popleft()
        return self.fallback(request)


def _every_request(request: RecordedRequest) -> bool:
    return True
