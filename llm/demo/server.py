"""The demo model's HTTP server: ``POST /v1/messages`` as the Anthropic SDK calls it,
and ``POST /v1/chat/completions`` as the openai SDK does (read into the same request and
answered by the same demo logic, llm/demo/openai_wire.py).

The app reaches it through ``ANTHROPIC_BASE_URL`` (or ``OPENAI_BASE_URL`` ending in
``/v1``), exactly as it reaches the real APIs.
``DemoHandler`` and ``DemoModelServer`` are meant to be extended: a test double adds
scripted replies and faults by overriding ``DemoHandler.answer``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from llm.demo import openai_wire, wire
from llm.demo.context_management import apply_context_management
from llm.demo.model import DemoReply, MessagesRequest, TextReply, ToolReply, default_reply

MESSAGES_PATH = "/v1/messages"


class DemoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: DemoModelServer
    # Which API the request came through: its errors are written in that API's shape.
    chat_completions = False

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        request = self.read_request()
        if request is not None:
            self.answer(request)

    def read_request(self) -> MessagesRequest | None:
        """The request, or None once an error answer has been sent for it."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = self.path.split("?")[0].rstrip("/")
        self.chat_completions = route == openai_wire.CHAT_PATH
        if route != MESSAGES_PATH and not self.chat_completions:
            self.send_api_error(404, "not_found_error", f"No route {self.path}")
            return None
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            self.send_api_error(400, "invalid_request_error", "Body is not JSON.")
            return None
        headers = dict(self.headers.items())
        if self.chat_completions:
            return MessagesRequest(
                path=self.path, headers=headers, body=openai_wire.messages_body(body), wire_body=body
            )
        request = MessagesRequest(path=self.path, headers=headers, body=body)
        problem = apply_context_management(request)
        if problem:
            self.send_api_error(400, "invalid_request_error", problem)
            return None
        return request

    def answer(self, request: MessagesRequest) -> None:
        self.respond(request, self.server.reply_for(request))

    def respond(self, request: MessagesRequest, reply: DemoReply) -> None:
        """Send ``reply`` streamed or as one body, as the request asks."""
        turn = self.turn(request, reply)
        if request.chat_completions:
            cached = self.server.chat_cached_tokens(request)
            if request.stream:
                self.send_stream(openai_wire.chat_stream(turn, cached_tokens=cached))
            else:
                self.send_json(200, openai_wire.chat_body(turn, cached_tokens=cached))
        elif request.stream:
            self.send_stream(wire.stream(turn))
        else:
            self.send_json(200, wire.message_body(turn))

    def turn(self, request: MessagesRequest, reply: DemoReply) -> wire.Turn:
        if isinstance(reply, ToolReply):
            name = reply.name or request.answer_call_name or "tool"
            tool = wire.ToolUse(name=name, input_json=json.dumps(reply.input))
            return self.make_turn(
                request,
                text=reply.text,
                tool=tool,
                chunk_size=reply.chunk_size,
                chunk_delay=reply.chunk_delay,
                input_tokens=reply.input_tokens,
                output_tokens=reply.output_tokens,
            )
        if isinstance(reply, TextReply):
            return self.make_turn(
                request,
                text=reply.text,
                chunk_size=reply.chunk_size,
                chunk_delay=reply.chunk_delay,
                stop=reply.stop_reason,
            )
        raise TypeError(f"The demo model cannot say {reply!r}")

    def make_turn(
        self,
        request: MessagesRequest,
        *,
        text: str = "",
        tool: wire.ToolUse | None = None,
        chunk_size: int = 16,
        chunk_delay: float = 0.0,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        stop: str | None = None,
    ) -> wire.Turn:
        """A turn with the usage estimated (about four characters a token) unless given.

        A request with prompt-caching breakpoints reports the cache as the API does:
        ``input_tokens`` is then the uncached rest (or, when given, as given), beside the
        tokens written to and read from the cache (DemoModelServer.cache_usage)."""
        output = text + (tool.input_json if tool else "")
        prompt_tokens = wire.estimate_tokens(request.prompt_text)
        created, read = self.server.cache_usage(request)
        cached = (created or 0) + (read or 0)
        return wire.Turn(
            model=str(request.body.get("model") or self.server.model_name),
            input_tokens=input_tokens or max(1, prompt_tokens - cached),
            cache_creation_input_tokens=created,
            cache_read_input_tokens=read,
            output_tokens=output_tokens or wire.estimate_tokens(output),
            text=text,
            tool=tool,
            chunk_size=chunk_size,
            chunk_delay=chunk_delay,
            stop=stop,
            context_management=None if request.applied_edits is None else {"applied_edits": request.applied_edits},
        )

    def send_json(self, status: int, payload: wire.JSONObject, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", wire.request_id())
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_api_error(self, status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> None:
        if self.chat_completions:
            self.send_json(status, openai_wire.error_body(status, message), headers)
        else:
            self.send_json(status, wire.error_body(error_type, message), headers)

    def send_stream(self, frames: Iterable[wire.Frame]) -> None:
        """Write SSE frames as they come (a float is a pause); the connection closes after."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", wire.request_id())
        self.end_headers()
        self.close_connection = True
        try:
            for frame in frames:
                if isinstance(frame, float):
                    time.sleep(frame)
                    continue
                self.wfile.write(frame)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client hung up (a cancelled run): nothing more to say.
            return


# Prompt caching as the API documents it: an entry lives 5 minutes from its last use; a
# breakpoint finds an earlier entry at most 20 blocks before it; a prefix shorter than the
# model's minimum is not cached. Minimums by model-name prefix (the longest that matches);
# a model not listed (the tests' made-up names) has none.
CACHE_TTL_SECONDS = 300.0
CACHE_LOOKBACK_BLOCKS = 20
MIN_CACHEABLE_TOKENS: dict[str, int] = {
    "claude-opus-4": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-haiku-4-5": 4096,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}


def min_cacheable_tokens(model: str) -> int:
    for name in sorted(MIN_CACHEABLE_TOKENS, key=len, reverse=True):
        if model.startswith(name):
            return MIN_CACHEABLE_TOKENS[name]
    return 0


class DemoModelServer(ThreadingHTTPServer):
    """``with DemoModelServer() as server:`` serves in a thread; the SDK's base URL is
    ``server.url``. Or call ``serve_forever()`` in the foreground."""

    daemon_threads = True
    handler_class: type[DemoHandler] = DemoHandler
    model_name = "claude-demo"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        fallback: Callable[[MessagesRequest], DemoReply] = default_reply,
    ) -> None:
        self.fallback = fallback
        self._thread: threading.Thread | None = None
        # Prompt caching: the hash of each cached prefix and when it expires (clock()).
        self.cached_prefixes: dict[str, float] = {}
        self.clock: Callable[[], float] = time.monotonic
        self.min_cacheable_tokens: Callable[[str], int] = min_cacheable_tokens
        self._cache_lock = threading.Lock()
        super().__init__((host, port), self.handler_class)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply_for(self, request: MessagesRequest) -> DemoReply:
        return self.fallback(request)

    def chat_cached_tokens(self, request: MessagesRequest) -> int:
        """Cached prompt tokens a Chat Completions reply reports. OpenAI caches prefixes
        by itself, with no breakpoints to read; the demo reports none (a test double
        may)."""
        return 0

    def cache_usage(self, request: MessagesRequest) -> tuple[int | None, int | None]:
        """``(cache_creation_input_tokens, cache_read_input_tokens)`` of ``request``, or
        ``(None, None)`` when it has no ``cache_control`` breakpoint.

        As the API documents it: the prompt (tools, system, messages) is read from the
        cache up to the longest cached prefix found at a breakpoint or at most
        CACHE_LOOKBACK_BLOCKS blocks before one; the rest up to the last breakpoint is
        written to it, and every breakpoint's prefix is cached for CACHE_TTL_SECONDS from
        its last use. A prefix shorter than the model's minimum (``min_cacheable_tokens``) is
        neither written nor read: the request then reports ``(0, 0)``."""
        parts = request.prompt_parts()
        marks = [index for index, (_, _, marked) in enumerate(parts) if marked]
        if not marks:
            return None, None
        minimum = self.min_cacheable_tokens(str(request.body.get("model") or ""))
        digest = hashlib.sha256()
        chars = 0
        prefixes: list[tuple[str, int]] = []  # (hash, characters so far)
        for key, text, _ in parts:
            digest.update(key.encode())
            chars += len(text)
            prefixes.append((digest.hexdigest(), chars))
        cacheable = [index for index in marks if prefixes[index][1] // 4 >= minimum]
        now = self.clock()
        with self._cache_lock:
            for prefix, expires in list(self.cached_prefixes.items()):
                if expires <= now:
                    del self.cached_prefixes[prefix]
            hit = -1
            for mark in marks:
                for index in range(mark, max(-1, mark - CACHE_LOOKBACK_BLOCKS - 1), -1):
                    if prefixes[index][0] in self.cached_prefixes:
                        hit = max(hit, index)
                        break
            # A hit refreshes its entry; every long-enough breakpoint is (re)written.
            for index in ([hit] if hit >= 0 else []) + cacheable:
                self.cached_prefixes[prefixes[index][0]] = now + CACHE_TTL_SECONDS
        read = prefixes[hit][1] // 4 if hit >= 0 else 0
        written = prefixes[cacheable[-1]][1] // 4 - read if cacheable else 0
        return max(0, written), read

    def start(self) -> Self:
        self._thread = threading.Thread(target=self.serve_forever, name="demo-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread = None
        self.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
