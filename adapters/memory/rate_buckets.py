"""RateBuckets twin: each tenant's buckets in a dict, decided by the domain (W23)."""

from __future__ import annotations

from plaita.application.tenancy import current_tenant
from plaita.domain.rate_limits import RateRule, Take, decide_take

#: Past this many buckets, a take first forgets every bucket whose TAT has passed (a passed
#: bucket equals no bucket), so a process that met many keys does not keep them all.
_SWEEP_ABOVE = 10_000


class MemoryRateBuckets:
    def __init__(self) -> None:
        self._tats: dict[tuple[str, str], int] = {}

    async def take(self, key: str, rule: RateRule, *, now_ms: int) -> Take:
        bucket = (current_tenant(), key)
        if len(self._tats) > _SWEEP_ABOVE:
            now_us = now_ms * 1_000
            self._tats = {k: tat for k, tat in self._tats.items() if tat > now_us}
        take = decide_take(self._tats.get(bucket), now_ms, rule)
        if take.tat_us is not None:
            self._tats[bucket] = take.tat_us
        return take
