"""The event bus's handled marks on Redis: one key with a TTL per (event, handler) (V3)."""

from __future__ import annotations

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys

#: As long as the event record itself: a re-publish within it does not re-run a handler.
HANDLED_MARK_TTL_SECONDS = 7 * 24 * 60 * 60


class RedisHandledMarks:
    """HandledMarks as ``{ns}:evdone:{<event_id>}:<handler_id>`` keys with a TTL.

    One key per command: the same on a single node and on a cluster.
    """

    def __init__(
        self, client: redis.Redis, keys: RedisKeys, *, ttl_seconds: int = HANDLED_MARK_TTL_SECONDS
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError(f"a handled mark ttl must be > 0 seconds, got {ttl_seconds}")
        self._client = client
        self._keys = keys
        self._ttl_seconds = ttl_seconds

    async def is_handled(self, event_id: str, handler_id: str) -> bool:
        return bool(await self._client.exists(self._keys.event_handled(event_id, handler_id)))

    async def mark_handled(self, event_id: str, handler_id: str) -> None:
        # NX: a second success (two processes raced) keeps the first mark and its TTL.
        await self._client.set(
            self._keys.event_handled(event_id, handler_id), "1", nx=True, ex=self._ttl_seconds
        )
