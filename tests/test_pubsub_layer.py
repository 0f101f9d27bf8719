"""The production channel layer (config.pubsub_layer) against a real, private redis-server.

Two layer instances stand for two daphne processes (each has its own Redis connection and
its own sockets) and a third for a Celery worker that publishes. What is checked: one
group message reaches every socket of every process, in order, nothing lost; after Redis
was killed and started again, every socket in a group is told once to catch up, and
delivery goes on; ``capacity`` bounds what a stalled socket holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from config.pubsub_layer import CatchUpPubSubChannelLayer
from core.live import RESUBSCRIBED_MESSAGE_TYPE
from tests.processes import RedisServer, free_port

pytestmark = pytest.mark.slow

# Long enough for a busy two-core machine; the checks themselves wait for nothing timed.
WAIT = 30.0


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(port=free_port(), workdir=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def layer_for(server: RedisServer, **config: Any) -> CatchUpPubSubChannelLayer:
    hosts = [{"address": server.url, "retry_on_error": [RedisConnectionError]}]
    return CatchUpPubSubChannelLayer(hosts=hosts, prefix="test-pubsub:", **config)


async def sockets_in_group(layer: CatchUpPubSubChannelLayer, group: str, count: int) -> list[str]:
    channels = [await layer.new_channel() for _ in range(count)]
    for channel in channels:
        await layer.group_add(group, channel)
    return channels


async def receive_all(layer: CatchUpPubSubChannelLayer, channels: list[str], count: int) -> list[list[Any]]:
    async def one(channel: str) -> list[Any]:
        return [await layer.receive(channel) for _ in range(count)]

    return await asyncio.wait_for(asyncio.gather(*(one(channel) for channel in channels)), WAIT)


def test_one_publish_reaches_every_socket_of_every_process_in_order(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        web_a, web_b, worker = layer_for(redis_server), layer_for(redis_server), layer_for(redis_server)
        on_a = await sockets_in_group(web_a, "task-1", 200)
        on_b = await sockets_in_group(web_b, "task-1", 50)
        elsewhere = await sockets_in_group(web_b, "task-2", 3)
        for number in range(100):
            await worker.group_send("task-1", {"type": "event.message", "n": number})
        await worker.group_send("task-2", {"type": "event.message", "n": "other"})

        expected = [{"type": "event.message", "n": number} for number in range(100)]
        for layer, channels in ((web_a, on_a), (web_b, on_b)):
            for received in await receive_all(layer, channels, 100):
                assert received == expected
        assert await receive_all(web_b, elsewhere, 1) == [[{"type": "event.message", "n": "other"}]] * 3
        for layer in (web_a, web_b, worker):
            await layer.flush()

    asyncio.run(scenario())


def test_sockets_are_told_to_catch_up_once_redis_is_back(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        web, worker = layer_for(redis_server), layer_for(redis_server)
        grouped = await sockets_in_group(web, "task-1", 20)
        health_check = await web.new_channel("healthz.")  # in no group: nothing to catch up
        await worker.group_send("task-1", {"type": "event.message", "n": 1})
        assert await receive_all(web, grouped, 1) == [[{"type": "event.message", "n": 1}]] * 20

        assert redis_server.process is not None
        redis_server.process.kill()  # as the OOM killer would: no goodbye to the clients
        redis_server.process.wait(10)
        # A publish while Redis is away fails where it is made (the worker logs it; the
        # event is stored), it is not swallowed.
        with pytest.raises((RedisConnectionError, OSError)):
            await worker.group_send("task-1", {"type": "event.message", "n": 2})
        redis_server.start()

        # Without any publish: each socket in a group gets the notice, once.
        notices = await receive_all(web, grouped, 1)
        assert notices == [[{"type": RESUBSCRIBED_MESSAGE_TYPE}]] * 20
        # Subscribed again: what is published now arrives, and nothing else came before it.
        await worker.group_send("task-1", {"type": "event.message", "n": 3})
        assert await receive_all(web, grouped, 1) == [[{"type": "event.message", "n": 3}]] * 20
        await worker.send(health_check, {"type": "healthz.ping"})
        assert await asyncio.wait_for(web.receive(health_check), WAIT) == {"type": "healthz.ping"}
        for layer in (web, worker):
            await layer.flush()

    asyncio.run(scenario())


def test_a_stalled_socket_holds_at_most_capacity_messages(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        web, worker = layer_for(redis_server, capacity=3), layer_for(redis_server)
        (stalled,) = await sockets_in_group(web, "task-1", 1)
        probe = await web.new_channel()
        for number in range(5):
            await worker.group_send("task-1", {"type": "event.message", "n": number})
        # One connection carries all of a process's subscriptions, in publishing order:
        # once the probe is in, the five have been handed out (or dropped).
        await worker.send(probe, {"type": "probe"})
        assert await asyncio.wait_for(web.receive(probe), WAIT) == {"type": "probe"}
        # The first three were kept; the rest, marker included, were dropped.
        assert [m["n"] for m in (await receive_all(web, [stalled], 3))[0]] == [0, 1, 2]
        await worker.group_send("task-1", {"type": "event.message", "n": "after"})
        assert await receive_all(web, [stalled], 1) == [[{"type": "event.message", "n": "after"}]]
        for layer in (web, worker):
            await layer.flush()

    asyncio.run(scenario())
