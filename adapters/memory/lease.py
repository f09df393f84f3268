"""In-memory twin of the Redis lease manager: leases expire on the injected Clock (W3, W4)."""

from __future__ import annotations

from plaita.adapters.memory.tenancy import ScopedId, scoped
from plaita.application.ports import Clock
from plaita.domain.lease import Lease, next_generation


class MemoryLeaseManager:
    """LeaseManager in memory; generations are never reset, like ``…:fencegen``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._leases: dict[ScopedId, tuple[Lease, int]] = {}
        self._generations: dict[ScopedId, int] = {}

    async def acquire(self, execution_id: str, holder_id: str, *, ttl_ms: int) -> Lease | None:
        _check_ttl(ttl_ms)
        if self._live(execution_id) is not None:
            return None
        generation = next_generation(self._generations.get(scoped(execution_id)))
        self._generations[scoped(execution_id)] = generation
        lease = Lease(execution_id=execution_id, holder_id=holder_id, generation=generation)
        self._leases[scoped(execution_id)] = (lease, self._now_ms() + ttl_ms)
        return lease

    async def renew(self, lease: Lease, *, ttl_ms: int) -> bool:
        _check_ttl(ttl_ms)
        if self._live(lease.execution_id) != lease:
            return False
        self._leases[scoped(lease.execution_id)] = (lease, self._now_ms() + ttl_ms)
        return True

    async def release(self, lease: Lease) -> bool:
        if self._live(lease.execution_id) != lease:
            return False
        del self._leases[scoped(lease.execution_id)]
        return True

    async def holder(self, execution_id: str) -> Lease | None:
        return self._live(execution_id)

    async def current_generation(self, execution_id: str) -> int | None:
        return self._generations.get(scoped(execution_id))

    def revoke(self, execution_id: str, *, advance_generation: bool) -> None:
        """Drop the lease whoever holds it; the generation stays (W13 delete).

        ``advance_generation`` moves the counter on (an operator delete), so the revoked
        holder's fence is stale from now on; a counter never handed out stays absent.
        """
        self._leases.pop(scoped(execution_id), None)
        current = self._generations.get(scoped(execution_id))
        if advance_generation and current is not None:
            self._generations[scoped(execution_id)] = next_generation(current)

    def monotonic_ms(self) -> int:
        """The clock leases expire on, for stores that expire records the same way."""
        return self._now_ms()

    def _live(self, execution_id: str) -> Lease | None:
        held = self._leases.get(scoped(execution_id))
        if held is None:
            return None
        lease, expires_at_ms = held
        if self._now_ms() >= expires_at_ms:
            del self._leases[scoped(execution_id)]
            return None
        return lease

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)


def _check_ttl(ttl_ms: int) -> None:
    if ttl_ms <= 0:
        raise ValueError(f"a lease ttl must be a positive number of milliseconds, got {ttl_ms}")
