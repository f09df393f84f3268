"""In-memory twin of the Redis replay markers: one-time marks with a TTL on the Clock (W10)."""

from __future__ import annotations

from plaita.application.ports import Clock


class MemoryReplayMarkerStore:
    """ReplayMarkerStore in memory; a marker expires on the injected clock's monotonic time."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: (dlq_key, dlq_id) -> (value, expiry in ms on the monotonic clock)
        self._markers: dict[tuple[str, str], tuple[str, int]] = {}

    async def claim(self, dlq_key: str, dlq_id: str, value: str, *, ttl_ms: int) -> bool:
        if ttl_ms <= 0:
            raise ValueError(
                f"a marker ttl must be a positive number of milliseconds, got {ttl_ms}"
            )
        if self._live(dlq_key, dlq_id) is not None:
            return False
        self._markers[(dlq_key, dlq_id)] = (value, self._now_ms() + ttl_ms)
        return True

    async def release(self, dlq_key: str, dlq_id: str, value: str) -> bool:
        if self._live(dlq_key, dlq_id) != value:
            return False
        del self._markers[(dlq_key, dlq_id)]
        return True

    async def get(self, dlq_key: str, dlq_id: str) -> str | None:
        return self._live(dlq_key, dlq_id)

    def _live(self, dlq_key: str, dlq_id: str) -> str | None:
        stored = self._markers.get((dlq_key, dlq_id))
        if stored is None:
            return None
        if self._now_ms() >= stored[1]:
            del self._markers[(dlq_key, dlq_id)]
            return None
        return stored[0]

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)
