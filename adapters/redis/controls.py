"""Operator flags and parked carriers on Redis, beside the checkpoint (W23, ADR 0008).

Two hashes in the execution's tenant namespace and hash tag, written without the lease:

- ``…:x:{<id>}:control``  ``paused`` / ``cancel_requested`` → ``"1"`` (a cleared flag is
  deleted, so an execution never paused has no key at all);
- ``…:x:{<id>}:parked``   carrier id → the carrier's stream fields as JSON.

The worker's gate (``admit``) is one EVALSHA that reads the flags and parks in the same step,
so an unpause can never miss a carrier parked "just before" it cleared the flag.

Neither hash has a TTL while the execution is live. The checkpoint that ends it gives both
one (at most the retention, S5, in the checkpoint's own script on Redis storage; through
``retain`` with SQL storage); a carrier parked after that takes the flags' TTL. The delete
script removes both (W13).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text, text_fields
from plaita.adapters.redis.tick_pipeline import tick_pipeline
from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.ports import Admission, ParkedCarrier
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.operator_controls import ControlFlags, parked_carrier_id

_SET = "1"


class RedisExecutionControls:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._admit = client.register_script(read_script("controls_admit"))
        self._tick = tick_pipeline(client)

    async def get(self, execution_id: str) -> ControlFlags:
        return (await self.get_many([execution_id]))[execution_id]

    async def get_many(self, execution_ids: Sequence[str]) -> Mapping[str, ControlFlags]:
        ids = list(dict.fromkeys(execution_ids))
        if not ids:
            return {}
        # Different executions live in different slots: no MULTI across them, one round trip.
        async with self._client.pipeline(transaction=False) as pipe:
            for execution_id in ids:
                pipe.hgetall(self._keys.execution_control(execution_id))
                pipe.hlen(self._keys.execution_parked(execution_id))
            replies = await pipe.execute()
        return {
            execution_id: _flags(replies[2 * i], replies[2 * i + 1])
            for i, execution_id in enumerate(ids)
        }

    async def set_flags(
        self,
        execution_id: str,
        *,
        paused: bool | None = None,
        cancel_requested: bool | None = None,
    ) -> ControlFlags:
        control = self._keys.execution_control(execution_id)
        async with self._client.pipeline(transaction=True) as pipe:
            for name, value in (("paused", paused), ("cancel_requested", cancel_requested)):
                if value is True:
                    pipe.hset(control, name, _SET)
                elif value is False:
                    pipe.hdel(control, name)
            pipe.hgetall(control)
            pipe.hlen(self._keys.execution_parked(execution_id))
            replies = await pipe.execute()
        return _flags(replies[-2], replies[-1])

    async def admit(self, envelope: TaskEnvelope, *, parkable: bool) -> Admission:
        fields = encode_envelope(envelope)
        keys = [
            self._keys.execution_control(envelope.execution_id),
            self._keys.execution_parked(envelope.execution_id),
        ]
        document = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        reply = await self._tick.script(
            self._admit,
            keys=keys,
            args=["1" if parkable else "0", parked_carrier_id(fields), document],
        )
        paused, cancel, count, parked_now, stranded = reply
        flags = ControlFlags(
            paused=int(paused) == 1, cancel_requested=int(cancel) == 1, parked=int(count)
        )
        flat = [text(part) for part in stranded or []]
        carriers = _carriers(dict(zip(flat[::2], flat[1::2], strict=True)))
        return Admission(flags, parked=int(parked_now) == 1, stranded=tuple(carriers))

    async def parked(self, execution_id: str) -> Sequence[ParkedCarrier]:
        stored = await self._client.hgetall(self._keys.execution_parked(execution_id))
        return _carriers(text_fields(stored))

    async def unpark(self, execution_id: str, carrier_ids: Sequence[str]) -> int:
        if not carrier_ids:
            return 0
        key = self._keys.execution_parked(execution_id)
        return int(await self._client.hdel(key, *dict.fromkeys(carrier_ids)))

    async def retain(self, execution_id: str, *, ttl_ms: int | None) -> None:
        keys = [
            self._keys.execution_control(execution_id),
            self._keys.execution_parked(execution_id),
        ]
        async with self._client.pipeline(transaction=True) as pipe:
            for key in keys:
                if ttl_ms is None:
                    pipe.persist(key)
                else:
                    pipe.pexpire(key, ttl_ms)
            await pipe.execute()

    async def clear(self, execution_id: str) -> None:
        await self._client.delete(
            self._keys.execution_control(execution_id),
            self._keys.execution_parked(execution_id),
        )


def _flags(control: Any, parked: Any) -> ControlFlags:
    fields = text_fields(control)
    return ControlFlags(
        paused=fields.get("paused") == _SET,
        cancel_requested=fields.get("cancel_requested") == _SET,
        parked=int(parked or 0),
    )


def _carriers(stored: Mapping[str, str]) -> list[ParkedCarrier]:
    carriers = [
        ParkedCarrier(carrier_id, decode_envelope(json.loads(document)))
        for carrier_id, document in stored.items()
    ]
    carriers.sort(key=lambda carrier: (carrier.envelope.timestamp_ms, carrier.carrier_id))
    return carriers
