"""RateBuckets twin: each tenant's buckets in a dict, decided by the domain (W23)."""

from __future__ import annotations

from plaita.application.tenancy import current_tenant
from plaita.domain.rate_limits import Bucket, RateRule, Take, decide_take

#: Past this many buckets, a take first forgets every bucket whose TAT and tail have passed
#: (such a bucket equals no bucket), so a process that met many keys does not keep them all.
_SWEEP_ABOVE = 10_000


class MemoryRateBuckets:
    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], Bucket] = {}

    async def take(self, key: str, rule: RateRule, *, now_ms: int) -> Take:
        bucket = (current_tenant(), key)
        if len(self._buckets) > _SWEEP_ABOVE:
            now_us = now_ms * 1_000
            self._buckets = {k: b for k, b in self._buckets.items() if b.expires_us() > now_us}
        take = decide_take(self._buckets.get(bucket), now_ms, rule)
        if take.bucket is not None:
            self._buckets[bucket] = take.bucket
        return take
