"""The event reconciler's cursor on Redis, only ever moved forward (V5)."""

from __future__ import annotations

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys

_MEMBER = "cursor"


class RedisReconcilerCursor:
    """ReconcilerCursor on ``{ns}:events:reconciler:cursor``.

    A sorted set of one member rather than a string: ``ZADD GT`` keeps the larger of the
    stored and the new score in one command, so event filters reconciling side by side never
    move the cursor back, without a script. Epoch milliseconds are far below 2**53 and stay
    exact as a score.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._key = keys.reconciler_cursor()

    async def get(self) -> int | None:
        score = await self._client.zscore(self._key, _MEMBER)
        return None if score is None else int(score)

    async def set(self, cursor_ms: int) -> None:
        await self._client.zadd(self._key, {_MEMBER: cursor_ms}, gt=True)
