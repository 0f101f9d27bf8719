"""The embedded channel layer across threads, and the websocket entry of config/asgi.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from config.asgi import application
from config.embedded import EmbeddedChannelLayer


class ServerLoop:
    """An event loop in its own thread, standing in for daphne's."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 5) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def server() -> Any:
    server = ServerLoop()
    yield server
    server.close()


def receive_in_background(server: ServerLoop, layer: EmbeddedChannelLayer, channel: str, count: int) -> Any:
    """Start a consumer-like receive loop on the server; returns its concurrent future."""

    async def consume() -> list[tuple[float, dict[str, Any]]]:
        got = []
        for _ in range(count):
            message = await asyncio.wait_for(layer.receive(channel), 3)
            got.append((time.perf_counter(), message))
        return got

    return asyncio.run_coroutine_threadsafe(consume(), server.loop)


def wait_until(condition: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_group_send_from_a_worker_thread_wakes_the_server_loop_at_once(server: ServerLoop) -> None:
    layer = EmbeddedChannelLayer()
    channel = server.run(layer.new_channel())
    server.run(layer.group_add("task-1", channel))
    assert layer.server_loop is server.loop
    pending = receive_in_background(server, layer, channel, 1)
    wait_until(lambda: channel in layer.channels)  # the receive is waiting on the server loop

    sent_at = time.perf_counter()
    # What a Celery task does from its pool thread: a throwaway loop per call.
    async_to_sync(layer.group_send)("task-1", {"type": "agent.log", "chunk": "hello"})

    [(received_at, message)] = pending.result(3)
    assert message == {"type": "agent.log", "chunk": "hello"}
    # The plain in-memory layer waits for something else to wake the loop (~450 ms
    # on an idle daphne, forever on this idle loop).
    assert received_at - sent_at < 0.1


def test_many_sends_from_threads_arrive_in_order(server: ServerLoop) -> None:
    layer = EmbeddedChannelLayer()
    channel = server.run(layer.new_channel())
    server.run(layer.group_add("task-1", channel))
    pending = receive_in_background(server, layer, channel, 200)

    def publish() -> None:
        for i in range(100):
            async_to_sync(layer.group_send)("task-1", {"type": "n", "i": i})
            async_to_sync(layer.send)(channel, {"type": "direct", "i": i})

    worker = threading.Thread(target=publish)
    worker.start()
    worker.join(10)

    messages = [message for _, message in pending.result(5)]
    assert [m["i"] for m in messages if m["type"] == "n"] == list(range(100))
    assert [m["i"] for m in messages if m["type"] == "direct"] == list(range(100))


def test_sends_on_the_server_loop_and_after_it_stopped_run_directly() -> None:
    layer = EmbeddedChannelLayer()

    async def roundtrip() -> dict[str, Any]:
        channel = await layer.new_channel()
        await layer.group_add("g", channel)
        await layer.group_send("g", {"type": "same.loop"})
        return await layer.receive(channel)

    # Each async_to_sync call runs on a loop that is gone afterwards: the layer takes
    # the next one rather than handing over to a dead loop (and hanging).
    assert async_to_sync(roundtrip)() == {"type": "same.loop"}
    assert async_to_sync(roundtrip)() == {"type": "same.loop"}


ORIGIN = (b"origin", b"http://127.0.0.1")
HOST = (b"host", b"127.0.0.1")


async def _connect(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[bool, object]:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, close_code = await communicator.connect()
    if connected:
        await communicator.disconnect()
    return connected, close_code


@pytest.mark.django_db(transaction=True)
def test_unknown_websocket_path_is_refused_cleanly() -> None:
    connected, close_code = async_to_sync(_connect)("/ws/no-such-thing/", [ORIGIN, HOST])
    assert connected is False
    assert close_code == 1000


@pytest.mark.django_db(transaction=True)
def test_websocket_from_a_foreign_origin_is_refused() -> None:
    connected, _ = async_to_sync(_connect)("/ws/no-such-thing/", [(b"origin", b"https://evil.example"), HOST])
    assert connected is False
