"""Start dedup claims on Redis: SET NX with a TTL, answered in one script call (W6)."""

from __future__ import annotations

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text


class RedisDedupStore:
    """DedupStore on ``{ns}:dedup:{<tenant>}:<key>``."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._keys = keys
        self._claim = client.register_script(read_script("dedup_claim"))
        self._release = client.register_script(read_script("dedup_release"))

    async def claim(
        self, key: str, execution_id: str, *, tenant_id: str, ttl_ms: int
    ) -> str | None:
        holder = await self._claim(
            keys=[self._keys.dedup(tenant_id, key)], args=[execution_id, ttl_ms]
        )
        return None if holder is None else text(holder)

    async def release(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        released = await self._release(keys=[self._keys.dedup(tenant_id, key)], args=[execution_id])
        return bool(released)
