"""RateBuckets on Redis (W23): read a bucket, let the domain decide, compare-and-set.

One key per bucket (``keys.rate_bucket``), its own hash tag, so every script is one slot. Its
value is ``"<TAT µs>:<tail µs>"`` (the waiters' queue tail, ``plaita.domain.rate_limits``); a
bare ``"<TAT µs>"`` (written before the tail existed) reads as tail 0. Every take reads it
and swaps the value the domain decided (two round trips: an admitted take moves the TAT, a
denied one the tail). A swap that meets another taker's value decides again from the value
the script returns, up to ``SWAP_ATTEMPTS`` times; then the take answers "not yet"
(``contended``) — the caller reschedules its carrier, never drops it.
"""

from __future__ import annotations

import logging

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.domain.rate_limits import (
    Bucket,
    RateRule,
    Take,
    bucket_ttl_ms,
    contended,
    decide_take,
)

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
        raw = await self._client.get(bucket)
        read = "" if raw is None else text(raw)
        for _ in range(SWAP_ATTEMPTS):
            take = decide_take(_bucket(read), now_ms, rule)
            if take.bucket is None:
                return take
            reply = await self._swap(
                keys=[bucket],
                args=[read, _value(take.bucket), bucket_ttl_ms(take.bucket, now_ms)],
            )
            if int(reply[0]) == 1:
                return take
            read = text(reply[1])
        log.info(
            "event=rate_limit.contended key=%r attempts=%d: other takers kept moving the bucket; "
            "the node is tried again shortly",
            key,
            SWAP_ATTEMPTS,
        )
        return contended(now_ms, rule)


def _bucket(value: str) -> Bucket | None:
    if not value:
        return None
    tat, _, tail = value.partition(":")
    return Bucket(int(tat), int(tail) if tail else 0)


def _value(bucket: Bucket) -> str:
    return f"{bucket.tat_us}:{bucket.tail_us}"
