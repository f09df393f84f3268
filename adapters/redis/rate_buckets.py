"""RateBuckets on Redis (W23): read a bucket's TAT, let the domain decide, compare-and-set.

One key per bucket (``keys.rate_bucket``), its own hash tag, so every script is one slot. A
denied take writes nothing (one round trip); an admitted one swaps the TAT (two). A swap that
meets another taker's TAT decides again from the TAT the script returns, up to
``SWAP_ATTEMPTS`` times; then the take answers "not yet" (``contended``) — the caller
reschedules its carrier, never drops it.
"""

from __future__ import annotations

import logging

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.domain.rate_limits import RateRule, Take, bucket_ttl_ms, contended, decide_take

log = logging.getLogger("plaita.rate_limits")

#: Compare-and-set attempts of one take before it answers "not yet".
SWAP_ATTEMPTS = 5


class RedisRateBuckets:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._swap = client.register_script(read_script("rate_swap"))

    async def take(self, key: str, rule: RateRule, *, now_ms: int) -> Take:
        bucket = self._keys.rate_bucket(key)
        stored = _tat(await self._client.get(bucket))
        for _ in range(SWAP_ATTEMPTS):
            take = decide_take(stored, now_ms, rule)
            if take.tat_us is None:
                return take
            reply = await self._swap(
                keys=[bucket],
                args=[_field(stored), take.tat_us, bucket_ttl_ms(take.tat_us, now_ms)],
            )
            if int(reply[0]) == 1:
                return take
            stored = _tat(reply[1])
        log.info(
            "event=rate_limit.contended key=%r attempts=%d: other takers kept moving the bucket; "
            "the node is tried again shortly",
            key,
            SWAP_ATTEMPTS,
        )
        return contended(now_ms, rule)


def _tat(raw: object) -> int | None:
    value = "" if raw is None else text(raw)
    return int(value) if value else None


def _field(tat_us: int | None) -> str:
    return "" if tat_us is None else str(tat_us)
