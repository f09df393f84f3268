"""Commands packed into the Redis protocol by hiredis's C packer (P1).

redis-py packs every command in Python: each argument is type-checked, encoded and framed on
its own, about 20 µs for a checkpoint's save script of some 30 arguments, a sixth of a
worker's CPU per step. hiredis (installed with ``redis[hiredis]``) packs the same bytes in C
in about 5 µs. ``use_hiredis_packing`` gives a client's connections that packer; a command
with an argument hiredis would frame differently from redis-py (a float, whose text redis-py
takes from ``repr``) or that redis-py refuses (a bool, None) is packed by redis-py as before,
so the bytes on the wire and the errors are redis-py's own either way.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis.asyncio as redis
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

#: The argument types hiredis frames exactly as redis-py does (``bool`` is not one: its
#: class is checked exactly, not with ``isinstance``).
_EXACT = frozenset({str, bytes, int})


class _HiredisPacking(Connection):
    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        name = head.encode() if isinstance(head, str) else head
        if not isinstance(name, bytes):
            return super().pack_command(*args)
        # As redis-py: a command name with spaces ("SCRIPT LOAD") is sent as its words.
        parts = (*name.split(), *args[1:]) if b" " in name else (name, *args[1:])
        for part in parts:
            if part.__class__ not in _EXACT:
                return super().pack_command(*args)
        return [hiredis.pack_command(parts)]


class HiredisConnection(_HiredisPacking, Connection):
    pass


class HiredisSSLConnection(_HiredisPacking, SSLConnection):
    pass


class HiredisUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    pass


_FASTER: dict[type[Any], type[Any]] = {
    Connection: HiredisConnection,
    SSLConnection: HiredisSSLConnection,
    UnixDomainSocketConnection: HiredisUnixConnection,
}


def faster(connection_class: type[Any]) -> type[Any]:
    """The hiredis-packing variant of ``connection_class``; a class of its own is kept."""
    return _FASTER.get(connection_class, connection_class)


def use_hiredis_packing(client: redis.Redis) -> redis.Redis:
    """``client`` with its connections packing through hiredis; before it opens any."""
    if isinstance(client, redis.RedisCluster):
        manager = client.nodes_manager
        manager.connection_kwargs["connection_class"] = faster(
            manager.connection_kwargs.get("connection_class", Connection)
        )
        for node in manager.startup_nodes.values():
            node.connection_class = faster(node.connection_class)
        return client
    pool = client.connection_pool
    pool.connection_class = faster(pool.connection_class)
    return client
