"""The agent's stdio as the ACP SDK's transport, and the bridge to the caller's thread.

The SDK is asyncio; the caller is a worker thread that uses Django (the live log, the
editor's records, the test runner). Django refuses database work inside a running event
loop, and a test run must not stall the protocol, so the loop runs on a thread of its
own and every callback (``Bridge.call``) is executed back on the caller's thread, which
meanwhile waits on the bridge's queue and checks for a cancel and the deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import queue
import threading
from collections.abc import Callable
from typing import IO, Any

# One JSON-RPC message per line; a line longer than this is not an agent's message.
MAX_LINE_BYTES = 16 * 1024 * 1024
NOT_ACP = "the agent wrote something that is not an ACP message: {line!r}"


class PipeTransport:
    """Newline-delimited JSON-RPC over a started agent's pipes (the SDK's
    ``Transport`` protocol). A line that is not a JSON object ends the stream: an agent
    that prints anything else on stdout is broken, and ``garbage`` says what it printed."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._loop = loop
        self._inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._write_lock = threading.Lock()
        self.garbage: str | None = None
        threading.Thread(target=self._read, daemon=True, name="acp-agent-stdout").start()

    def _read(self) -> None:
        try:
            while line := self._stdout.readline(MAX_LINE_BYTES + 1):
                if not line.strip():
                    continue
                message = _decoded(line)
                if message is None:
                    self.garbage = NOT_ACP.format(line=line[:200].decode("utf-8", errors="replace").strip())
                    break
                self._loop.call_soon_threadsafe(self._inbox.put_nowait, message)
        except (OSError, ValueError):
            pass
        with contextlib.suppress(RuntimeError):  # the loop already closed
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, None)

    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode()
        # A full pipe (the agent not reading) must not block the loop.
        await asyncio.to_thread(self._write, data)

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            try:
                self._stdin.write(data)
                self._stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                raise ConnectionError("the agent's input is closed") from exc

    async def receive(self) -> dict[str, Any] | None:
        return await self._inbox.get()

    async def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()


def _decoded(line: bytes) -> dict[str, Any] | None:
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    return message


class Bridge:
    """Callbacks from the loop's thread executed on the caller's (``serve``)."""

    def __init__(self) -> None:
        self._calls: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = queue.Queue()

    async def call(self, function: Callable[[], Any]) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((function, future))
        return await asyncio.wrap_future(future)

    def wake(self) -> None:
        self._calls.put(None)

    def serve(self, *, done: Callable[[], bool], tick: Callable[[], None], poll_seconds: float = 0.1) -> None:
        """Run the callbacks until ``done``; ``tick`` between them (cancel, deadline)."""
        while not done():
            try:
                item = self._calls.get(timeout=poll_seconds)
            except queue.Empty:
                tick()
                continue
            if item is None:
                continue
            function, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function())
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine, which raises it
                future.set_exception(exc)
            tick()

    def drain(self) -> None:
        """Refuse what is still queued once the session is over."""
        while True:
            try:
                item = self._calls.get_nowait()
            except queue.Empty:
                return
            if item is not None and item[1].set_running_or_notify_cancel():
                item[1].set_exception(ConnectionError("the session is over"))
