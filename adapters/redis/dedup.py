"""Start dedup claims on Redis: SET NX with a TTL and a carrier mark, one script a call (W6)."""

from __future__ import annotations

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.application.ports import DedupClaim


class RedisDedupStore:
    """DedupStore on ``{ns}:dedup:{<tenant>}:<key>`` and its mark ``…:<key>:enqueued``."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._keys = keys
        self._claim = client.register_script(read_script("dedup_claim"))
        self._confirm = client.register_script(read_script("dedup_confirm"))
        self._release = client.register_script(read_script("dedup_release"))

    async def claim(
        self, key: str, execution_id: str, *, tenant_id: str, ttl_ms: int
    ) -> DedupClaim | None:
        reply = await self._claim(keys=self._keys_of(tenant_id, key), args=[execution_id, ttl_ms])
        if reply is None:
            return None
        holder, remaining_ms, marked = reply
        remaining = int(remaining_ms)
        return DedupClaim(
            execution_id=text(holder),
            age_ms=max(0, ttl_ms - remaining) if remaining > 0 else None,
            carrier_enqueued=bool(int(marked)),
        )

    async def confirm(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        return bool(await self._confirm(keys=self._keys_of(tenant_id, key), args=[execution_id]))

    async def release(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        return bool(await self._release(keys=self._keys_of(tenant_id, key), args=[execution_id]))

    def _keys_of(self, tenant_id: str, key: str) -> list[str]:
        claim = self._keys.dedup(tenant_id, key)
        return [claim, f"{claim}:enqueued"]
