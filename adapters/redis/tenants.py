"""Tenants' status records and parked carriers on Redis (W24), deployment-wide.

In the deployment's root namespace, one hash tag per tenant (``{<tenant_id>}``):

- ``…:tenant:{<id>}``                  hash: status, max_running, epoch, updated_at_ms, version;
- ``…:tenant:{<id>}:parked``           sorted set: parked carrier id → carrier timestamp;
- ``…:tenant:{<id>}:parked:carriers``  hash: parked carrier id → envelope fields JSON;
- ``…:tenants``                        set of the tenant ids with a record (for ``list``).

A write is ``tenant_write.lua`` (compare-and-set on the version), then SADD to the index (a
crash between them leaves a record ``list`` misses until the next write; never an index
member without a record that ``list`` would show). The worker's gate reads the record and
the parked count in one round trip, shared with its event-loop tick's other commands
(``tick_pipeline``); a park is ``tenant_park.lua``, which keeps the carrier only if the
record's version is still the one the domain decided on.
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
from plaita.application.ports import ParkedCarrier, TenantAdmission
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.operator_controls import parked_carrier_id
from plaita.domain.tenancy import validate_tenant_id
from plaita.domain.tenant_status import TenantRecord, TenantStatus


class RedisTenantDirectory:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._write = client.register_script(read_script("tenant_write"))
        self._park = client.register_script(read_script("tenant_park"))
        self._tick = tick_pipeline(client)

    async def get(self, tenant_id: str) -> TenantRecord | None:
        key = self._keys.tenant_record(validate_tenant_id(tenant_id))
        return _record(tenant_id, text_fields(await self._client.hgetall(key)))

    async def list(self) -> Sequence[TenantRecord]:
        members = sorted(text(m) for m in await self._client.smembers(self._keys.tenants()))
        if not members:
            return []
        # One tag per tenant: no MULTI across them, one round trip.
        async with self._client.pipeline(transaction=False) as pipe:
            for tenant_id in members:
                pipe.hgetall(self._keys.tenant_record(tenant_id))
            replies = await pipe.execute()
        found = (_record(t, text_fields(r)) for t, r in zip(members, replies, strict=True))
        return [record for record in found if record is not None]

    async def write(self, record: TenantRecord, *, expected_version: int) -> bool:
        tenant_id = validate_tenant_id(record.tenant_id)
        written = await self._write(
            keys=[self._keys.tenant_record(tenant_id)],
            args=[
                expected_version,
                record.status.value,
                "" if record.max_running is None else record.max_running,
                "" if record.epoch is None else record.epoch,
                record.updated_at_ms,
                record.version,
            ],
        )
        if int(written) != 1:
            return False
        await self._client.sadd(self._keys.tenants(), tenant_id)
        return True

    async def admission(self, tenant_id: str) -> TenantAdmission:
        validate_tenant_id(tenant_id)
        record_key = self._keys.tenant_record(tenant_id)
        parked_key = self._keys.tenant_parked(tenant_id)

        def queue(pipe: Any) -> None:
            pipe.hgetall(record_key)
            pipe.zcard(parked_key)

        stored, count = await self._tick.run(queue)
        for reply in (stored, count):
            if isinstance(reply, Exception):
                raise reply
        return TenantAdmission(_record(tenant_id, text_fields(stored)), int(count))

    async def park(self, envelope: TaskEnvelope, *, expected_version: int) -> bool:
        tenant_id = validate_tenant_id(envelope.tenant_id)
        fields = encode_envelope(envelope)
        document = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        kept = await self._tick.script(
            self._park,
            keys=[
                self._keys.tenant_record(tenant_id),
                self._keys.tenant_parked(tenant_id),
                self._keys.tenant_parked_carriers(tenant_id),
            ],
            args=[expected_version, parked_carrier_id(fields), envelope.timestamp_ms, document],
        )
        return int(kept) == 1

    async def parked(self, tenant_id: str, *, limit: int) -> Sequence[ParkedCarrier]:
        validate_tenant_id(tenant_id)
        ids = [
            text(m)
            for m in await self._client.zrange(self._keys.tenant_parked(tenant_id), 0, limit - 1)
        ]
        if not ids:
            return []
        documents = await self._client.hmget(self._keys.tenant_parked_carriers(tenant_id), ids)
        carriers = [
            ParkedCarrier(carrier_id, decode_envelope(json.loads(text(document))))
            for carrier_id, document in zip(ids, documents, strict=True)
            if document is not None
        ]
        carriers.sort(key=lambda carrier: (carrier.envelope.timestamp_ms, carrier.carrier_id))
        return carriers

    async def parked_count(self, tenant_id: str) -> int:
        return int(
            await self._client.zcard(self._keys.tenant_parked(validate_tenant_id(tenant_id)))
        )

    async def unpark(self, tenant_id: str, carrier_ids: Sequence[str]) -> int:
        validate_tenant_id(tenant_id)
        ids = list(dict.fromkeys(carrier_ids))
        if not ids:
            return 0
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.zrem(self._keys.tenant_parked(tenant_id), *ids)
            pipe.hdel(self._keys.tenant_parked_carriers(tenant_id), *ids)
            removed, _ = await pipe.execute()
        return int(removed)


def _record(tenant_id: str, fields: Mapping[str, str]) -> TenantRecord | None:
    if not fields:
        return None
    max_running = fields.get("max_running")
    epoch = fields.get("epoch")
    return TenantRecord(
        tenant_id=tenant_id,
        status=TenantStatus(fields["status"]),
        max_running=None if max_running is None else int(max_running),
        epoch=None if epoch is None else int(epoch),
        updated_at_ms=int(fields.get("updated_at_ms", "0")),
        version=int(fields.get("version", "0")),
    )
