"""Budget counters on one Redis hash per execution, changed by one script (W7, W8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.application.ports import Counters
from plaita.domain.budgets import Counter, CounterChange, CounterOp

_NODE_PREFIX = f"{Counter.NODE_RETRIES.value}:"


class RedisCounterStore:
    """CounterStore on ``{ns}:x:{<execution_id>}:counters``, a hash with the fields

    ``noderetry:<node_id>`` (``noderetry:`` for the per-execution counter of node id None),
    ``noderefetch`` (total retries), ``g1wakeups`` and ``nofail``. Absent fields read 0; a
    reset deletes the field. Every ``apply`` refreshes the hash's TTL (sliding). In
    ``Counters.node_retries`` the counter of node id None is keyed ``""``.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._apply = client.register_script(read_script("counters_apply"))

    async def read(self, execution_id: str) -> Counters:
        fields = await self._client.hgetall(self._keys.counters(execution_id))
        return _counters({text(name): text(value) for name, value in (fields or {}).items()})

    async def apply(
        self, execution_id: str, changes: Sequence[CounterChange], *, ttl_ms: int
    ) -> Counters:
        if ttl_ms <= 0:
            raise ValueError(f"a counter ttl must be a positive number of ms, got {ttl_ms}")
        args: list[Any] = [ttl_ms]
        for change in changes:
            args.extend(_script_op(change))
        reply = await self._apply(keys=[self._keys.counters(execution_id)], args=args)
        flat = [text(part) for part in reply]
        return _counters(dict(zip(flat[::2], flat[1::2], strict=True)))


def _script_op(change: CounterChange) -> tuple[str, str]:
    """(op, field) for ``counters_apply.lua``; raises ValueError before anything is written."""
    counter, op, node_id = change.counter, change.op, change.node_id
    if node_id is not None and counter is not Counter.NODE_RETRIES:
        raise ValueError(f"counter {counter.value!r} is per execution, not per node")
    if counter is Counter.ALL_NODE_RETRIES:
        if op is not CounterOp.RESET:
            raise ValueError("every node counter at once can only be reset")
        return "delprefix", _NODE_PREFIX
    field = f"{_NODE_PREFIX}{node_id or ''}" if counter is Counter.NODE_RETRIES else counter.value
    return ("incr" if op is CounterOp.INCREMENT else "del"), field


def _counters(fields: dict[str, str]) -> Counters:
    return Counters(
        node_retries={
            name.removeprefix(_NODE_PREFIX): int(value)
            for name, value in fields.items()
            if name.startswith(_NODE_PREFIX)
        },
        total_retries=int(fields.get(Counter.TOTAL_RETRIES.value, 0)),
        wakeups=int(fields.get(Counter.WAKEUPS.value, 0)),
        no_fail=int(fields.get(Counter.NO_FAIL.value, 0)),
    )
