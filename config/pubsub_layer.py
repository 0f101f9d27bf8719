"""The production channel layer: Redis pub/sub, one publish per group, fanned out to the
sockets of each daphne process in memory, and a catch-up signal after Redis comes back.

channels-redis's per-socket layer (``channels_redis.core.RedisChannelLayer``) makes each
group message a Redis list push and a pop per socket: with 200 pages on one run that is
200 round trips per event, and latency swung from p50 64 ms to 5.2 s with the machine's
load (bench/RESULTS.md). ``channels_redis.pubsub.RedisPubSubChannelLayer`` publishes once;
each process subscribes once per group and copies the message to its local sockets.

What the upstream pub/sub layer does not do is say when messages were lost: when its
connection drops, its receive loop logs the error, sleeps, and redis-py reconnects and
subscribes again on the next read, silently (channels_redis#256; its ``on_disconnect`` and
``on_reconnect`` options are accepted but no longer called, channels_redis#406). Anything
published between the drop and the new subscription reached nobody. Here, once the
subscriptions are back, every socket of the process that is in a group is sent one
``layer.resubscribed`` message (``core.live.RESUBSCRIBED_MESSAGE_TYPE``), and the
consumer catches up from what is stored (core.consumers.LiveConsumer.layer_resubscribed).

Also kept from the per-socket layer: ``capacity``, the messages a socket may have waiting
before new ones are dropped (the upstream queues are unbounded, so a stalled socket
would hold every event in memory).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer, RedisSingleShardConnection
from channels_redis.utils import _wrap_close, create_pool
from redis import asyncio as aioredis
from redis.asyncio.client import PubSub

from core.live import RESUBSCRIBED_MESSAGE_TYPE

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY = 2000


class _PubSubTellingResubscriptions(PubSub):
    """A redis-py PubSub that calls ``on_resubscribed`` after it subscribed again, on a
    new connection, to channels the old connection had (redis-py runs ``on_connect``
    on every reconnection, before the read that triggered it goes on)."""

    def __init__(self, *args: Any, on_resubscribed: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_resubscribed = on_resubscribed

    async def on_connect(self, connection: Any) -> None:
        # Nothing to restore on a first connection: subscribe() records a channel only
        # after its command succeeded.
        had_subscriptions = self.subscribed
        await super().on_connect(connection)
        if had_subscriptions:
            self._on_resubscribed()


class _ShardConnection(RedisSingleShardConnection):
    channel_layer: _CatchUpLoopLayer
    _redis: aioredis.Redis | None
    _pubsub: PubSub | None

    def _ensure_redis(self) -> None:
        if self._redis is None:
            pool = create_pool(self.host)
            self._redis = aioredis.Redis(connection_pool=pool)
            self._pubsub = _PubSubTellingResubscriptions(pool, on_resubscribed=self.channel_layer.resubscribed)

    def _receive_message(self, message: dict[str, Any] | None) -> None:
        if message is None:
            return
        name = message["channel"]
        if isinstance(name, bytes):
            name = name.decode()
        layer = self.channel_layer
        if name in layer.channels:
            layer.deliver(name, message["data"])
        elif name in layer.groups:
            for channel in layer.groups[name]:
                layer.deliver(channel, message["data"])


class _CatchUpLoopLayer(RedisPubSubLoopLayer):
    """The upstream per-loop layer, with ``capacity`` and the catch-up signal."""

    channels: dict[str, asyncio.Queue[bytes]]
    groups: dict[str, set[str]]
    _shards: list[RedisSingleShardConnection]

    def __init__(self, hosts: Any = None, capacity: int = DEFAULT_CAPACITY, **kwargs: Any) -> None:
        super().__init__(hosts, **kwargs)
        self.capacity = capacity
        self._shards = [_ShardConnection(shard.host, self) for shard in self._shards]

    def deliver(self, channel: str, data: bytes) -> None:
        queue = self.channels.get(channel)
        if queue is None:
            return
        if queue.qsize() >= self.capacity:
            # As the per-socket layer does at capacity; the page catches up from the
            # stored events when it reconnects.
            logger.warning("Channel %s has %d messages waiting: dropping one", channel, queue.qsize())
            return
        queue.put_nowait(data)

    def resubscribed(self) -> None:
        """Redis came back: whatever was published while this process was not subscribed
        is lost to it. Every socket in a group is told, once, to catch up."""
        notice = self.channel_layer.serialize({"type": RESUBSCRIBED_MESSAGE_TYPE})
        grouped = set().union(*self.groups.values()) if self.groups else set()
        logger.warning("Subscribed to Redis again: %d sockets told to catch up", len(grouped))
        for channel in grouped:
            queue = self.channels.get(channel)
            if queue is not None:
                # Past capacity too: this one message is what makes the socket whole.
                queue.put_nowait(notice)


class CatchUpPubSubChannelLayer(RedisPubSubChannelLayer):
    """``channels_redis.pubsub.RedisPubSubChannelLayer`` with ``capacity`` and the
    ``layer.resubscribed`` signal (see the module's docstring). Same configuration."""

    def _get_layer(self) -> _CatchUpLoopLayer:
        # Upstream's, building this module's per-loop layer instead of its own.
        loop = asyncio.get_running_loop()
        try:
            layer: _CatchUpLoopLayer = self._layers[loop]
        except KeyError:
            layer = _CatchUpLoopLayer(*self._args, **self._kwargs, channel_layer=self)
            self._layers[loop] = layer
            _wrap_close(self, loop)
        return layer
