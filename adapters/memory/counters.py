"""In-memory twin of the Redis counter store: one counter map per execution, TTL on the clock."""

from __future__ import annotations

from collections.abc import Sequence

from plaita.application.ports import Clock, Counters
from plaita.domain.budgets import Counter, CounterChange, CounterOp

_NODE_PREFIX = f"{Counter.NODE_RETRIES.value}:"


class MemoryCounterStore:
    """CounterStore in memory, with the Redis hash's field names and sliding TTL.

    The counter of node id None is kept under ``noderetry:`` and read back under ``""`` in
    ``Counters.node_retries``, as on Redis.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: execution id → (fields, expires at monotonic ms)
        self._hashes: dict[str, tuple[dict[str, int], int]] = {}

    async def read(self, execution_id: str) -> Counters:
        return _counters(self._live(execution_id))

    async def apply(
        self, execution_id: str, changes: Sequence[CounterChange], *, ttl_ms: int
    ) -> Counters:
        if ttl_ms <= 0:
            raise ValueError(f"a counter ttl must be a positive number of ms, got {ttl_ms}")
        ops = [_op(change) for change in changes]  # every change is checked before any write
        fields = dict(self._live(execution_id))
        for op, field in ops:
            if op == "incr":
                fields[field] = fields.get(field, 0) + 1
            elif op == "del":
                fields.pop(field, None)
            else:
                fields = {name: n for name, n in fields.items() if not name.startswith(field)}
        if fields:
            self._hashes[execution_id] = (fields, self._now_ms() + ttl_ms)
        else:
            self._hashes.pop(execution_id, None)  # like Redis: an emptied hash is deleted
        return _counters(fields)

    async def forget(self, execution_id: str) -> None:
        """Drop the execution's counters, as the Redis delete script does (W13)."""
        self._hashes.pop(execution_id, None)

    def _live(self, execution_id: str) -> dict[str, int]:
        held = self._hashes.get(execution_id)
        if held is None:
            return {}
        fields, expires_at_ms = held
        if self._now_ms() >= expires_at_ms:
            del self._hashes[execution_id]
            return {}
        return fields

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)


def _op(change: CounterChange) -> tuple[str, str]:
    counter, op, node_id = change.counter, change.op, change.node_id
    if node_id is not None and counter is not Counter.NODE_RETRIES:
        raise ValueError(f"counter {counter.value!r} is per execution, not per node")
    if counter is Counter.ALL_NODE_RETRIES:
        if op is not CounterOp.RESET:
            raise ValueError("every node counter at once can only be reset")
        return "delprefix", _NODE_PREFIX
    field = f"{_NODE_PREFIX}{node_id or ''}" if counter is Counter.NODE_RETRIES else counter.value
    return ("incr" if op is CounterOp.INCREMENT else "del"), field


def _counters(fields: dict[str, int]) -> Counters:
    return Counters(
        node_retries={
            name.removeprefix(_NODE_PREFIX): n
            for name, n in fields.items()
            if name.startswith(_NODE_PREFIX)
        },
        total_retries=fields.get(Counter.TOTAL_RETRIES.value, 0),
        wakeups=fields.get(Counter.WAKEUPS.value, 0),
        no_fail=fields.get(Counter.NO_FAIL.value, 0),
    )
