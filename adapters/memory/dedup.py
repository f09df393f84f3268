"""DedupStore twin: start dedup claims with a TTL read from the injected clock (W6)."""

from __future__ import annotations

from plaita.application.ports import Clock


class MemoryDedupStore:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._claims: dict[tuple[str, str], tuple[str, int]] = {}

    async def claim(
        self, key: str, execution_id: str, *, tenant_id: str, ttl_ms: int
    ) -> str | None:
        now = self._clock.now_ms()
        held = self._claims.get((tenant_id, key))
        if held is not None and held[1] > now:
            return held[0]
        self._claims[(tenant_id, key)] = (execution_id, now + ttl_ms)
        return None

    async def release(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        held = self._claims.get((tenant_id, key))
        if held is None or held[0] != execution_id or held[1] <= self._clock.now_ms():
            return False
        del self._claims[(tenant_id, key)]
        return True
