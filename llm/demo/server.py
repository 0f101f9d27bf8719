"""The demo model's HTTP server: ``POST /v1/messages`` as the Anthropic SDK calls it.

The app reaches it through ``ANTHROPIC_BASE_URL``, exactly as it reaches Anthropic.
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

from llm.demo import wire
from llm.demo.model import DemoReply, MessagesRequest, TextReply, ToolReply, default_reply

MESSAGES_PATH = "/v1/messages"


class DemoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: DemoModelServer

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
        if self.path.split("?")[0].rstrip("/") != MESSAGES_PATH:
            self.send_api_error(404, "not_found_error", f"No route {self.path}")
            return None
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            self.send_api_error(400, "invalid_request_error", "Body is not JSON.")
            return None
        return MessagesRequest(path=self.path, headers=dict(self.headers.items()), body=body)

    def answer(self, request: MessagesRequest) -> None:
        self.respond(request, self.server.reply_for(request))

    def respond(self, request: MessagesRequest, reply: DemoReply) -> None:
        """Send ``reply`` streamed or as one body, as the request asks."""
        turn = self.turn(request, reply)
        if request.stream:
            self.send_stream(wire.stream(turn))
        else:
            self.send_json(200, wire.message_body(turn))

    def turn(self, request: MessagesRequest, reply: DemoReply) -> wire.Turn:
        if isinstance(reply, ToolReply):
            tool = wire.ToolUse(name=reply.name or request.answer_tool or "tool", input_json=json.dumps(reply.input))
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
        # Prompt caching: the hashes of the prefixes cached so far (never expiring).
        self.cached_prefixes: set[str] = set()
        self._cache_lock = threading.Lock()
        super().__init__((host, port), self.handler_class)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply_for(self, request: MessagesRequest) -> DemoReply:
        return self.fallback(request)

    def cache_usage(self, request: MessagesRequest) -> tuple[int | None, int | None]:
        """``(cache_creation_input_tokens, cache_read_input_tokens)`` of ``request``, or
        ``(None, None)`` when it has no ``cache_control`` breakpoint.

        As the API does it: the prompt (tools, system, messages) is read from the cache
        up to the longest prefix an earlier request cached, the rest up to the last
        breakpoint is written to it, and every breakpoint's prefix is cached from now on.
        (The API's minimum cacheable length is left out: the demo's prompts are short.)"""
        parts = request.prompt_parts()
        if not any(marked for _, _, marked in parts):
            return None, None
        digest = hashlib.sha256()
        chars = 0
        prefixes: list[tuple[str, int, bool]] = []  # (hash, characters so far, breakpoint)
        for key, text, marked in parts:
            digest.update(key.encode())
            chars += len(text)
            prefixes.append((digest.hexdigest(), chars, marked))
        last = max(index for index, (_, _, marked) in enumerate(prefixes) if marked)
        with self._cache_lock:
            hits = [index for index in range(last + 1) if prefixes[index][0] in self.cached_prefixes]
            self.cached_prefixes.update(prefix for prefix, _, marked in prefixes if marked)
        read_chars = prefixes[hits[-1]][1] if hits else 0
        read = read_chars // 4
        return prefixes[last][1] // 4 - read, read

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
