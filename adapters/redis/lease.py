"""Leases with fence generations on Redis, one Lua script per change (W3, W4)."""

from __future__ import annotations

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.adapters.redis.tick_pipeline import tick_pipeline
from plaita.domain.lease import Lease, parse_lease_value


class RedisLeaseManager:
    """LeaseManager on ``…:lease`` (``holder|generation``, PX ttl) and ``…:fencegen``."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._acquire = client.register_script(read_script("lease_acquire"))
        self._renew = client.register_script(read_script("lease_renew"))
        self._release = client.register_script(read_script("lease_release"))
        self._tick = tick_pipeline(client)

    async def acquire(self, execution_id: str, holder_id: str, *, ttl_ms: int) -> Lease | None:
        check_ttl(ttl_ms)
        keys = [self._keys.lease(execution_id), self._keys.fence_generation(execution_id)]
        generation = await self._tick.script(self._acquire, keys=keys, args=[holder_id, ttl_ms])
        if generation is None:
            return None
        return Lease(execution_id=execution_id, holder_id=holder_id, generation=int(generation))

    async def renew(self, lease: Lease, *, ttl_ms: int) -> bool:
        check_ttl(ttl_ms)
        keys = [self._keys.lease(lease.execution_id)]
        return bool(await self._tick.script(self._renew, keys=keys, args=[lease.value, ttl_ms]))

    async def release(self, lease: Lease) -> bool:
        keys = [self._keys.lease(lease.execution_id)]
        return bool(await self._tick.script(self._release, keys=keys, args=[lease.value]))

    async def holder(self, execution_id: str) -> Lease | None:
        value = await self._client.get(self._keys.lease(execution_id))
        return None if value is None else parse_lease_value(execution_id, text(value))

    async def current_generation(self, execution_id: str) -> int | None:
        value = await self._client.get(self._keys.fence_generation(execution_id))
        return None if value is None else int(value)


def check_ttl(ttl_ms: int) -> None:
    """A lease's ttl is a positive number of milliseconds; ``ValueError`` otherwise."""
    if ttl_ms <= 0:
        raise ValueError(f"a lease ttl must be a positive number of milliseconds, got {ttl_ms}")
