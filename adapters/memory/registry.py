"""In-memory twin of the Redis worker registry: records expire on the injected clock (W16)."""

from __future__ import annotations

from collections.abc import Sequence

from plaita.application.ports import Clock, WorkerInstance


class MemoryWorkerRegistry:
    """WorkerRegistry in memory; ``list`` drops expired records, as the Redis adapter prunes."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: instance id → (record, expires at monotonic ms)
        self._records: dict[str, tuple[WorkerInstance, int]] = {}

    async def put(self, instance: WorkerInstance, *, ttl_ms: int) -> None:
        if ttl_ms <= 0:
            raise ValueError(f"a registry ttl must be a positive number of ms, got {ttl_ms}")
        self._records[instance.instance_id] = (instance, self._now_ms() + ttl_ms)

    async def get(self, instance_id: str) -> WorkerInstance | None:
        return self._live(instance_id)

    async def list(self) -> Sequence[WorkerInstance]:
        live = (self._live(instance_id) for instance_id in sorted(self._records))
        return [instance for instance in live if instance is not None]

    async def remove(self, instance_id: str) -> None:
        self._records.pop(instance_id, None)

    def _live(self, instance_id: str) -> WorkerInstance | None:
        held = self._records.get(instance_id)
        if held is None:
            return None
        instance, expires_at_ms = held
        if self._now_ms() >= expires_at_ms:
            del self._records[instance_id]
            return None
        return instance

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)
