"""Budget counters on one Redis hash per execution, changed by one script (W7, W8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.adapters.redis.tick_pipeline import tick_pipeline
from plaita.application.codec import counter_op, counters_from_fields
from plaita.application.ports import Counters
from plaita.domain.budgets import CounterChange


class RedisCounterStore:
    """CounterStore on ``{ns}:x:{<execution_id>}:counters``, a hash with the fields

    ``noderetry:<node_id>`` (``noderetry:`` for the per-execution counter of node id None),
    ``nodecrash:<node_id>``, ``noderefetch`` (total retries), ``g1wakeups``, ``nofail`` and
    ``attempt`` (the open dispatch's lease generation). Absent fields read 0; a reset deletes
    the field. Every ``apply`` and ``begin_attempt`` refreshes the hash's TTL (sliding). In
    ``Counters.node_retries`` the counter of node id None is keyed ``""``.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._apply = client.register_script(read_script("counters_apply"))
        self._begin = client.register_script(read_script("counters_begin_attempt"))
        self._end = client.register_script(read_script("counters_end_attempt"))
        self._tick = tick_pipeline(client)

    async def read(self, execution_id: str) -> Counters:
        fields = await self._client.hgetall(self._keys.counters(execution_id))
        return counters_from_fields(
            {text(name): text(value) for name, value in (fields or {}).items()}
        )

    async def begin_attempt(self, execution_id: str, generation: int, *, ttl_ms: int) -> Counters:
        _check_ttl(ttl_ms)
        reply = await self._tick.script(
            self._begin, keys=[self._keys.counters(execution_id)], args=[generation, ttl_ms]
        )
        return _counters_of(reply)

    async def end_attempt(self, execution_id: str, generation: int) -> bool:
        keys = [self._keys.counters(execution_id)]
        return bool(await self._tick.script(self._end, keys=keys, args=[generation]))

    async def apply(
        self, execution_id: str, changes: Sequence[CounterChange], *, ttl_ms: int
    ) -> Counters:
        _check_ttl(ttl_ms)
        args: list[Any] = [ttl_ms]
        for change in changes:
            args.extend(counter_op(change))
        return _counters_of(await self._apply(keys=[self._keys.counters(execution_id)], args=args))


def _counters_of(reply: Sequence[Any]) -> Counters:
    flat = [text(part) for part in reply]
    return counters_from_fields(dict(zip(flat[::2], flat[1::2], strict=True)))


def _check_ttl(ttl_ms: int) -> None:
    if ttl_ms <= 0:
        raise ValueError(f"a counter ttl must be a positive number of ms, got {ttl_ms}")
