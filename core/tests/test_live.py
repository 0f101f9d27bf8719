"""Group sends from synchronous code run on one long-lived loop per process."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from channels.layers import get_channel_layer

from core import live


class RecordingLayer:
    """A channel layer that records the loop each send ran on, or hangs, or fails."""

    def __init__(self, behaviour: str = "ok") -> None:
        self.behaviour = behaviour
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.cancelled = threading.Event()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.loops.append(asyncio.get_running_loop())
        if self.behaviour == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if self.behaviour == "refused":
            raise ConnectionRefusedError("Error 111 connecting to 127.0.0.1:6379")
        self.sent.append((group, message))


@pytest.fixture
def layer(monkeypatch) -> RecordingLayer:
    recording = RecordingLayer()
    monkeypatch.setattr(live, "get_channel_layer", lambda: recording)
    return recording


def test_every_send_runs_on_the_same_loop_and_arrives_in_order(layer) -> None:
    for number in range(5):
        live.group_send("task-1", {"type": "n", "number": number})
    assert [message["number"] for _, message in layer.sent] == [0, 1, 2, 3, 4]
    assert len(set(map(id, layer.loops))) == 1, "one loop for all sends, not one per send"
    assert layer.loops[0].is_running()


def test_sends_from_many_threads_share_the_loop(layer) -> None:
    threads = [threading.Thread(target=live.group_send, args=(f"task-{n}", {"type": "n"})) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(group for group, _ in layer.sent) == sorted(f"task-{n}" for n in range(8))
    assert len(set(map(id, layer.loops))) == 1


def test_a_send_the_layer_never_finishes_is_given_up_at_the_timeout(layer) -> None:
    layer.behaviour = "hang"
    with pytest.raises(TimeoutError, match=r"did not take the message within 0\.3 s"):
        live.group_send("task-1", {"type": "n"}, timeout=0.3)
    assert layer.cancelled.wait(3), "the hanging send is cancelled, not left running"
    layer.behaviour = "ok"
    live.group_send("task-1", {"type": "after"})  # the loop still serves
    assert layer.sent == [("task-1", {"type": "after"})]


def test_the_layers_error_reaches_the_caller(layer) -> None:
    layer.behaviour = "refused"
    with pytest.raises(ConnectionRefusedError, match="Error 111"):
        live.group_send("task-1", {"type": "n"})


def test_a_forked_child_starts_a_loop_of_its_own(layer, monkeypatch) -> None:
    live.group_send("task-1", {"type": "parent"})
    parent_loop = layer.loops[-1]
    # What a forked child sees: the same loop object, another process id, no thread.
    monkeypatch.setattr(live.os, "getpid", lambda: -1)
    live.group_send("task-1", {"type": "child"})
    assert layer.loops[-1] is not parent_loop and layer.loops[-1].is_running()


def test_a_send_reaches_a_consumer_waiting_on_another_loop() -> None:
    # The real layer of this run (embedded in-memory, or Redis): a consumer's loop
    # waits on its channel while a worker thread sends to its group.
    channel_layer = get_channel_layer()

    async def consumer() -> dict[str, Any]:
        channel = await channel_layer.new_channel()
        await channel_layer.group_add("live-test", channel)
        threading.Thread(target=live.group_send, args=("live-test", {"type": "hello", "n": 1})).start()
        try:
            return await asyncio.wait_for(channel_layer.receive(channel), 5)
        finally:
            await channel_layer.group_discard("live-test", channel)

    assert asyncio.run(consumer()) == {"type": "hello", "n": 1}
