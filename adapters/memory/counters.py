"""In-memory twin of the Redis counter store: one counter map per execution, TTL on the clock."""

from __future__ import annotations

from collections.abc import Sequence

from plaita.adapters.memory.tenancy import ScopedId, scoped
from plaita.application.codec import OPEN_ATTEMPT_FIELD, counter_op, counters_from_fields
from plaita.application.ports import Clock, Counters
from plaita.domain.budgets import CounterChange


class MemoryCounterStore:
    """CounterStore in memory, with the Redis hash's field names and sliding TTL.

    The counter of node id None is kept under ``noderetry:`` and read back under ``""`` in
    ``Counters.node_retries``, as on Redis.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: execution id → (fields, expires at monotonic ms)
        self._hashes: dict[ScopedId, tuple[dict[str, int], int]] = {}

    async def read(self, execution_id: str) -> Counters:
        return counters_from_fields(self._live(execution_id))

    async def begin_attempt(self, execution_id: str, generation: int, *, ttl_ms: int) -> Counters:
        _check_ttl(ttl_ms)
        before = dict(self._live(execution_id))
        self._keep(execution_id, {**before, OPEN_ATTEMPT_FIELD: generation}, ttl_ms)
        return counters_from_fields(before)

    async def end_attempt(self, execution_id: str, generation: int) -> bool:
        fields = dict(self._live(execution_id))
        if fields.get(OPEN_ATTEMPT_FIELD) != generation:
            return False
        del fields[OPEN_ATTEMPT_FIELD]
        held = self._hashes[scoped(execution_id)]
        self._store(execution_id, fields, held[1])
        return True

    async def apply(
        self, execution_id: str, changes: Sequence[CounterChange], *, ttl_ms: int
    ) -> Counters:
        _check_ttl(ttl_ms)
        ops = [counter_op(change) for change in changes]  # every change is checked before any write
        fields = dict(self._live(execution_id))
        for op, field in ops:
            if op == "incr":
                fields[field] = fields.get(field, 0) + 1
            elif op == "del":
                fields.pop(field, None)
            else:
                fields = {name: n for name, n in fields.items() if not name.startswith(field)}
        self._keep(execution_id, fields, ttl_ms)
        return counters_from_fields(fields)

    def _keep(self, execution_id: str, fields: dict[str, int], ttl_ms: int) -> None:
        self._store(execution_id, fields, self._now_ms() + ttl_ms)

    def _store(self, execution_id: str, fields: dict[str, int], expires_at_ms: int) -> None:
        if fields:
            self._hashes[scoped(execution_id)] = (fields, expires_at_ms)
        else:
            self._hashes.pop(scoped(execution_id), None)  # like Redis: an emptied hash is deleted

    async def forget(self, execution_id: str) -> None:
        """Drop the execution's counters, as the Redis delete script does (W13)."""
        self._hashes.pop(scoped(execution_id), None)

    async def expire_within(self, execution_id: str, ttl_ms: int) -> None:
        """Expire the counters at most ``ttl_ms`` from now, never later than they would
        (PEXPIRE … LT in the Redis checkpoint script of a terminal execution, S5)."""
        held = self._hashes.get(scoped(execution_id))
        if held is not None:
            fields, expires_at_ms = held
            self._hashes[scoped(execution_id)] = (
                fields,
                min(expires_at_ms, self._now_ms() + ttl_ms),
            )

    def _live(self, execution_id: str) -> dict[str, int]:
        held = self._hashes.get(scoped(execution_id))
        if held is None:
            return {}
        fields, expires_at_ms = held
        if self._now_ms() >= expires_at_ms:
            del self._hashes[scoped(execution_id)]
            return {}
        return fields

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)


def _check_ttl(ttl_ms: int) -> None:
    if ttl_ms <= 0:
        raise ValueError(f"a counter ttl must be a positive number of ms, got {ttl_ms}")
