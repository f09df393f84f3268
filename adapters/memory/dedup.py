"""DedupStore twin: start dedup claims with a TTL read from the injected clock (W6)."""

from __future__ import annotations

import attrs

from plaita.application.ports import Clock, DedupClaim


@attrs.define
class _Claim:
    execution_id: str
    claimed_at_ms: int
    expires_at_ms: int
    enqueued: bool = False


class MemoryDedupStore:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._claims: dict[tuple[str, str], _Claim] = {}

    async def claim(
        self, key: str, execution_id: str, *, tenant_id: str, ttl_ms: int
    ) -> DedupClaim | None:
        now = self._clock.now_ms()
        held = self._live(tenant_id, key)
        if held is not None:
            return DedupClaim(held.execution_id, now - held.claimed_at_ms, held.enqueued)
        self._claims[(tenant_id, key)] = _Claim(execution_id, now, now + ttl_ms)
        return None

    async def confirm(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        held = self._live(tenant_id, key)
        if held is None or held.execution_id != execution_id:
            return False
        held.enqueued = True
        return True

    async def release(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        held = self._live(tenant_id, key)
        if held is None or held.execution_id != execution_id:
            return False
        del self._claims[(tenant_id, key)]
        return True

    def _live(self, tenant_id: str, key: str) -> _Claim | None:
        held = self._claims.get((tenant_id, key))
        if held is not None and held.expires_at_ms <= self._clock.now_ms():
            del self._claims[(tenant_id, key)]
            return None
        return held
