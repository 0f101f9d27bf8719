"""A fake Anthropic Messages API: a real local HTTP server, streaming included.

The production code reaches it through the SDK's ``base_url``, exactly as it reaches
Anthropic. Tests script it reply by reply (``server.script(...)``) and inject faults;
when the script is empty it answers like a small, well-behaved model, so that
``make demo`` can run whole pipelines against it.

Wire format (see ../shared/PITFALLS.md): every SSE frame has an ``event:`` line, the
first event is ``message_start``, then content blocks, ``message_delta`` with the stop
reason and cumulative output tokens, ``message_stop``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEMO_MODEL_LABEL = "scripted demo model"


# --- Replies a test can script ---------------------------------------------------------


@dataclass
class ToolReply:
    """The model calls ``name`` (default: the tool the request forces) with ``input``."""

    input: dict[str, Any]
    name: str | None = None
    text: str = ""
    chunk_size: int = 24
    chunk_delay: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass
class TextReply:
    text: str
    chunk_size: int = 16
    chunk_delay: float = 0.0


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


Reply = ToolReply | TextReply | RawToolInputReply | HttpError | MidStreamError | Hang


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def forced_tool(self) -> str | None:
        choice = self.body.get("tool_choice") or {}
        return choice.get("name") if choice.get("type") == "tool" else None

    @property
    def answer_tool(self) -> str | None:
        """The tool that ends the agent's turn: the forced one, or the ``submit_…`` tool
        when the model may choose among tools (a tool-use loop)."""
        if self.forced_tool:
            return self.forced_tool
        for tool in self.body.get("tools") or []:
            if str(tool.get("name", "")).startswith("submit_"):
                return str(tool["name"])
        return None

    @property
    def tool_names(self) -> list[str]:
        return [str(tool.get("name")) for tool in self.body.get("tools") or []]

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks sent back so far in this conversation."""
        return [
            block
            for message in self.body.get("messages", [])
            if isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]

    @property
    def prompt_text(self) -> str:
        parts: list[str] = []
        system = self.body.get("system")
        if isinstance(system, str):
            parts.append(system)
        elif isinstance(system, list):
            parts.extend(block.get("text", "") for block in system if isinstance(block, dict))
        for message in self.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(json.dumps(block) for block in content)
        return "\n".join(parts)


# --- Default behaviour: a small model that does what each tool asks ---------------------


def default_reply(request: RecordedRequest, delay: float = 0.01) -> Reply:
    tool = request.answer_tool
    if "list_files" in request.tool_names and not request.forced_tool and not request.tool_results:
        # Given the repository tools, look around once before answering.
        return ToolReply(
            name="list_files",
            text="Looking at the repository before changing it.\n",
            input={"path": "."},
            chunk_delay=delay,
        )
    first_file = _first_file_listed(request)
    if first_file and not request.forced_tool and len(request.tool_results) == 1:
        # Then read one of the files it saw, as a model would before writing.
        return ToolReply(
            name="read_file",
            text=f"Reading {first_file} to see how the code is laid out.\n",
            input={"path": first_file},
            chunk_delay=delay,
        )
    if tool == "submit_plan":
        return ToolReply(
            text=(
                "Reading the task and splitting it into steps. The change needs a small, typed "
                "function and a test that pins its behaviour down.\n"
            ),
            input={
                "subtasks": [
                    {"id": "s1", "title": "Write the change", "description": "Implement the task.", "order": 1},
                    {"id": "s2", "title": "Cover it with a test", "description": "Add a test.", "order": 2},
                ]
            },
            chunk_delay=delay,
        )
    if tool == "submit_changes":
        return ToolReply(
            text="Writing the files for the plan: the function first, then its test.\n",
            input={
                "changes": [
                    {
                        "file_path": "src/feature.py",
                        "content": 'def feature() -> str:\n    return "done"\n',
                        "action": "create",
                    },
                    {
                        "file_path": "tests/test_feature.py",
                        "content": (
                            "from src.feature import feature\n\n\n"
                            "def test_feature() -> None:\n"
                            '    assert feature() == "done"\n'
                        ),
                        "action": "create",
                    },
                ]
            },
            chunk_delay=delay,
        )
    if tool == "submit_review":
        return ToolReply(
            text="Checking the changes against the plan: the function is typed and the test covers it.\n",
            input={"pass": True, "findings": []},
            chunk_delay=delay,
        )
    return TextReply(text=_chat_answer(request), chunk_delay=delay)


def _first_file_listed(request: RecordedRequest) -> str | None:
    """The first file in a ``list_files`` answer (lines like ``name (12 bytes)``)."""
    results = request.tool_results
    if not results or "read_file" not in request.tool_names:
        return None
    content = results[0].get("content")
    if isinstance(content, list):
        content = "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    match = re.search(r"^(\S[^\n]*?) \(\d+ bytes\)$", str(content or ""), re.MULTILINE)
    return match.group(1) if match else None


def _chat_answer(request: RecordedRequest) -> str:
    """A chat reply that shows the memory markers at work: "remember that X" is
    remembered, "my goal is X" becomes a goal, "I finished X" completes one."""
    messages = request.body.get("messages") or [{}]
    last = messages[-1].get("content", "")
    if isinstance(last, list):
        last = " ".join(block.get("text", "") for block in last if isinstance(block, dict))
    said = str(last).strip()
    lowered = said.lower()
    for cue, marker, reply in (
        ("remember that ", "REMEMBER", "I'll remember that."),
        ("my goal is ", "GOAL", "Good goal; I'll keep it in mind."),
        ("i finished ", "DONE", "Well done!"),
    ):
        if cue in lowered:
            value = said[lowered.index(cue) + len(cue) :].rstrip(".!")
            return f"{reply} [{marker}: {value}]"
    return (
        f'Hello from the {DEMO_MODEL_LABEL}. Try "remember that …", "my goal is …" '
        'or "I finished …" to see the memory at work.'
    )


# --- The server -----------------------------------------------------------------------


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _chunks(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), max(1, size)):
        yield text[start : start + size]


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class FakeAnthropicServer:
    """Start with ``with FakeAnthropicServer() as server:``; point the SDK at ``server.url``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.fallback: Callable[[RecordedRequest], Reply] = default_reply
        self.model_name = "claude-fake"
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                server._handle(self)

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeAnthropicServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one, then the fallback answers."""
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.requests.clear()
            self.fallback = default_reply

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    # -- request handling --

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._replies:
                return self._replies.popleft()
        return self.fallback(request)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        if handler.path.split("?")[0].rstrip("/") != "/v1/messages":
            self._send_json(handler, 404, self._error_body("not_found_error", f"No route {handler.path}"))
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send_json(handler, 400, self._error_body("invalid_request_error", "Body is not JSON."))
            return
        request = RecordedRequest(path=handler.path, headers=dict(handler.headers.items()), body=body)
        reply = self._next_reply(request)
        if isinstance(reply, Hang):
            time.sleep(reply.seconds)
            handler.close_connection = True
            return
        if isinstance(reply, HttpError):
            self._send_json(handler, reply.status, self._error_body(reply.error_type, reply.message), reply.headers)
            return
        if body.get("stream"):
            self._stream(handler, request, reply)
        else:
            self._send_json(handler, 200, self._message(request, reply))

    @staticmethod
    def _error_body(error_type: str, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_type, "message": message}}

    @staticmethod
    def _send_json(
        handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:12])
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _tool_name(self, request: RecordedRequest, reply: ToolReply | RawToolInputReply) -> str:
        return reply.name or request.answer_tool or "tool"

    def _usage(self, request: RecordedRequest, reply: Reply, output: str) -> tuple[int, int]:
        input_tokens = getattr(reply, "input_tokens", None) or _estimate_tokens(request.prompt_text)
        output_tokens = getattr(reply, "output_tokens", None) or _estimate_tokens(output)
        return input_tokens, output_tokens

    def _message(self, request: RecordedRequest, reply: Reply) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        output = ""
        stop_reason = "end_turn"
        if isinstance(reply, ToolReply):
            if reply.text:
                content.append({"type": "text", "text": reply.text})
            content.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:20],
                    "name": self._tool_name(request, reply),
                    "input": reply.input,
                }
            )
            output = reply.text + json.dumps(reply.input)
            stop_reason = "tool_use"
        elif isinstance(reply, TextReply):
            content.append({"type": "text", "text": reply.text})
            output = reply.text
        input_tokens, output_tokens = self._usage(request, reply, output)
        return {
            "id": "msg_" + uuid.uuid4().hex[:20],
            "type": "message",
            "role": "assistant",
            "model": request.body.get("model", self.model_name),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }

    def _stream(self, handler: BaseHTTPRequestHandler, request: RecordedRequest, reply: Reply) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:12])
        handler.end_headers()
        handler.close_connection = True
        try:
            for frame in self._frames(request, reply):
                if isinstance(frame, float):
                    time.sleep(frame)
                    continue
                handler.wfile.write(frame)
                handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client hung up (a cancelled run): nothing more to say.
            return

    def _frames(self, request: RecordedRequest, reply: Reply) -> Iterator[bytes | float]:
        input_tokens, _ = self._usage(request, reply, "")
        yield _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_" + uuid.uuid4().hex[:20],
                    "type": "message",
                    "role": "assistant",
                    "model": request.body.get("model", self.model_name),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                },
            },
        )
        yield _sse("ping", {"type": "ping"})
        output = ""
        index = 0
        sent_chunks = 0
        text = getattr(reply, "text", "")
        delay = getattr(reply, "chunk_delay", 0.0)
        chunk_size = getattr(reply, "chunk_size", 16)
        if isinstance(reply, MidStreamError):
            text = "Starting to think about it. " * 4
        if text:
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            )
            for piece in _chunks(text, chunk_size):
                if isinstance(reply, MidStreamError) and sent_chunks >= reply.after_chunks:
                    yield _sse("error", self._error_body(reply.error_type, reply.message))
                    return
                if delay:
                    yield delay
                yield _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                )
                sent_chunks += 1
                output += piece
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        if isinstance(reply, MidStreamError):
            yield _sse("error", self._error_body(reply.error_type, reply.message))
            return
        stop_reason = "end_turn"
        if isinstance(reply, (ToolReply, RawToolInputReply)):
            partial = reply.partial_json if isinstance(reply, RawToolInputReply) else json.dumps(reply.input)
            yield _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": "toolu_" + uuid.uuid4().hex[:20],
                        "name": self._tool_name(request, reply),
                        "input": {},
                    },
                },
            )
            for piece in _chunks(partial, getattr(reply, "chunk_size", 24)):
                if delay:
                    yield delay
                yield _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
                output += piece
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            stop_reason = "tool_use"
        _, output_tokens = self._usage(request, reply, output)
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the fake Anthropic Messages API (for make demo).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--delay", type=float, default=0.04, help="seconds between streamed chunks")
    args = parser.parse_args()
    server = FakeAnthropicServer(args.host, args.port)
    server.fallback = functools.partial(default_reply, delay=args.delay)
    print(f"Fake Anthropic API ({DEMO_MODEL_LABEL}) on {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server._httpd.serve_forever()


if __name__ == "__main__":
    main()
