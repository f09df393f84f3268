"""One-time replay markers of dead letters on Redis: SET NX PX, released by value (W10)."""

from __future__ import annotations

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text

# Compare-and-delete: a replay gives back only the marker it claimed itself, never one a
# later replay claimed after it expired.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisReplayMarkerStore:
    """ReplayMarkerStore on ``{ns}:dlq-replayed:{<dlq_key>}:<dlq_id>``."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._release = client.register_script(_RELEASE)

    async def claim(self, dlq_key: str, dlq_id: str, value: str, *, ttl_ms: int) -> bool:
        if ttl_ms <= 0:
            raise ValueError(
                f"a marker ttl must be a positive number of milliseconds, got {ttl_ms}"
            )
        key = self._keys.dlq_replayed(dlq_key, dlq_id)
        return bool(await self._client.set(key, value, nx=True, px=ttl_ms))

    async def release(self, dlq_key: str, dlq_id: str, value: str) -> bool:
        key = self._keys.dlq_replayed(dlq_key, dlq_id)
        return bool(await self._release(keys=[key], args=[value]))

    async def get(self, dlq_key: str, dlq_id: str) -> str | None:
        value = await self._client.get(self._keys.dlq_replayed(dlq_key, dlq_id))
        return None if value is None else text(value)
