"""The smallest fake of the OpenAI Chat Completions API the ACP tests need: a local
server an OpenAI-compatible agent (opencode's custom provider) is pointed at, answering
``POST /v1/chat/completions`` (streamed as server-sent events, or whole) from a script of
replies — text, or tool calls the real agent then executes — and recording every request.

NOTE for the lead: another helper (h6) writes a fuller Chat Completions fake
(``tests/fake_openai.py``); this one exists only because that had not landed when the
ACP tests were written. Merge the two (keep one) when both are in.
Standard library only.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-chat-model"


@dataclass
class ChatText:
    text: str


@dataclass
class ChatToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ChatRequest:
    path: str
    body: dict[str, Any]

    @property
    def tool_names(self) -> list[str]:
        return [tool.get("function", {}).get("name", "") for tool in self.body.get("tools") or []]

    @property
    def last_tool_result(self) -> str:
        """The content of the last ``tool`` message (what the agent's tool answered)."""
        for message in reversed(self.body.get("messages") or []):
            if message.get("role") == "tool":
                content = message.get("content")
                return content if isinstance(content, str) else json.dumps(content)
        return ""


ChatReply = ChatText | ChatToolCall


@dataclass
class FakeChatCompletions:
    """``with FakeChatCompletions() as fake:``; ``fake.url`` is the base URL (…/v1).
    ``main`` picks which requests take scripted replies (an agent also asks for a
    session title, say); the others are answered ``side_reply``."""

    # Not 127.0.0.1 for an agent that reaches its own loopback directly (opencode in
    # its sandbox): any address of 127/8 is this machine's.
    host: str = "127.0.0.1"
    main: Callable[[ChatRequest], bool] = lambda request: bool(request.body.get("tools"))
    side_reply: str = "A title"
    requests: list[ChatRequest] = field(default_factory=list)
    _replies: deque[ChatReply] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *replies: ChatReply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def next_reply(self, request: ChatRequest) -> ChatReply:
        with self._lock:
            self.requests.append(request)
            if self.main(request) and self._replies:
                return self._replies.popleft()
        return ChatText(self.side_reply if not self.main(request) else "Done.")

    def __enter__(self) -> FakeChatCompletions:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                request = ChatRequest(path=self.path, body=body)
                reply = fake.next_reply(request)
                if body.get("stream"):
                    self._stream(reply)
                else:
                    self._json(200, _completion(reply))

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: ChatReply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for chunk in _chunks(reply):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"


USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}


def _completion(reply: ChatReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    if isinstance(reply, ChatText):
        message["content"] = reply.text
    else:
        finish = "tool_calls"
        message["tool_calls"] = [_tool_call(reply)]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": USAGE,
    }


def _tool_call(reply: ChatToolCall) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": reply.name, "arguments": json.dumps(reply.arguments)},
    }


def _chunks(reply: ChatReply) -> list[dict[str, Any]]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk", "model": MODEL}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
    if isinstance(reply, ChatText):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": reply.text}, "finish_reason": None}]})
        finish = "stop"
    else:
        call = {**_tool_call(reply), "index": 0}
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]})
        finish = "tool_calls"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": USAGE})
    return chunks
