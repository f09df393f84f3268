"""End notices on Redis pub/sub: ``PUBLISH <tenant namespace>:ended <execution id>``.

Pub/sub is fire-and-forget, which is what a notice is (a waiter re-reads the state anyway):
a publish costs one command, and nothing is kept. A channel is not a key, so this works the
same on a single node and on a Redis Cluster (a classic PUBLISH reaches the subscribers of
every node).

The listening side is one subscription per process (per ``RedisEndNotices``), opened when the
first watch begins: one connection and one reader task route every message to the watches of
its execution. A watch begins only once the server confirmed the subscription, so a notice
published after ``watch`` returned is never missed. When the connection drops every watch is
woken (it re-reads the state) and the reader reconnects; redis-py subscribes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.connections import TRANSIENT_ERRORS
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text
from plaita.application.ports import EndWatch
from plaita.application.tenancy import current_tenant

log = logging.getLogger("plaita.end_notices")

#: How long one read of the subscription waits; bounds how long a close takes.
READ_TIMEOUT_S = 1.0
#: Pauses between reconnection attempts after the subscription's connection dropped.
RECONNECT_DELAYS_S = (0.05, 0.2, 0.5, 1.0, 2.0)


class RedisEndNotices:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._watches: dict[tuple[str, str], set[EndWatch]] = {}
        self._confirmed: dict[str, asyncio.Event] = {}
        self._subscribing = asyncio.Lock()

    async def announce(self, execution_id: str) -> None:
        await self._client.publish(self._keys.end_notices(current_tenant()), execution_id)

    @asynccontextmanager
    async def watch(self, execution_id: str) -> AsyncIterator[EndWatch]:
        channel = self._keys.end_notices(current_tenant())
        key = (channel, execution_id)
        watch = EndWatch()
        self._watches.setdefault(key, set()).add(watch)
        try:
            await self._subscribed(channel)
            yield watch
        finally:
            watches = self._watches.get(key)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[key]

    async def aclose(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(*TRANSIENT_ERRORS):
                await pubsub.aclose()
        self._confirmed.clear()
        self._wake_all()

    # --- the subscription ------------------------------------------------------------------

    async def _subscribed(self, channel: str) -> None:
        async with self._subscribing:
            confirmed = self._confirmed.get(channel)
            if confirmed is None:
                confirmed = self._confirmed[channel] = asyncio.Event()
                if self._pubsub is None:
                    if isinstance(self._client, redis.RedisCluster):
                        # Its pub/sub routes by the slot map, which a first command loads.
                        await self._client.initialize()
                    self._pubsub = self._client.pubsub()
                await self._pubsub.subscribe(channel)
                if self._reader is None:
                    self._reader = asyncio.create_task(self._read(), name="plaita-end-notices")
        await confirmed.wait()

    async def _read(self) -> None:
        failures = 0
        while True:
            try:
                message = await self._pubsub.get_message(timeout=READ_TIMEOUT_S)
            except TRANSIENT_ERRORS as exc:
                # Whatever was announced meanwhile is lost: every watch re-reads its state.
                self._wake_all()
                delay = RECONNECT_DELAYS_S[min(failures, len(RECONNECT_DELAYS_S) - 1)]
                failures += 1
                log.warning(
                    "event=end_notices.disconnected error=%s retry_in_s=%s: results are "
                    "awaited by re-reading the state until the subscription is back",
                    type(exc).__name__,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            failures = 0
            if message is not None:
                self._route(message)

    def _route(self, message: dict[str, Any]) -> None:
        channel = text(message.get("channel"))
        kind = text(message.get("type"))
        if kind == "subscribe":
            confirmed = self._confirmed.get(channel)
            if confirmed is not None:
                confirmed.set()
            return
        if kind != "message":
            return
        for watch in self._watches.get((channel, text(message.get("data"))), ()):
            watch.event.set()

    def _wake_all(self) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.event.set()
