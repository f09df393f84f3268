"""Closing a Redis client and dropping its idle connections, on a single node or a cluster.

The stores take a ``redis.Redis`` or a ``redis.RedisCluster`` (handed over typed as the
former). Their commands are the same, but not their connection handling: ``Redis`` keeps one
pool (``connection_pool``) and closes it on ``aclose(close_connection_pool=True)``;
``RedisCluster`` keeps a pool per node, has no ``connection_pool`` and its ``aclose()``
takes no argument and closes every node's connections. A closed cluster client
re-initialises on its next command, so ``aclose()`` also serves to drop its connections.
"""

from __future__ import annotations

import redis.asyncio as redis
from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError

#: Errors that say "Redis did not answer this time", on a single node or a cluster (a slot
#: without a reachable primary during a failover, a slot being migrated), not "this reply
#: or this code is wrong": worth the same command again after a pause.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    SlotNotCoveredError,
    TryAgainError,
)


async def close_client(client: redis.Redis) -> None:
    """Close ``client`` with its connections, also those of a pool it was built around."""
    if isinstance(client, redis.RedisCluster):
        await client.aclose()
        return
    # Explicitly with the pool: a client built around an injected pool would otherwise leave
    # its connections open (auto_close_connection_pool is False there).
    await client.aclose(close_connection_pool=True)


async def drop_idle_connections(client: redis.Redis) -> None:
    """Disconnect ``client``'s connections that no command is using; later commands open
    new ones. For connections opened on an event loop that is about to end: redis-py
    connections belong to the loop that opened them."""
    if isinstance(client, redis.RedisCluster):
        # Every node's connections and the slot map; rebuilt by the next command.
        await client.aclose()
        return
    await client.connection_pool.disconnect(inuse_connections=False)
