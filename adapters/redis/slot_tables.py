"""Slot tables on Redis (E1a concurrency keys, tenant quotas; ADR 0030).

One table is three keys in the tenant's namespace sharing the hash tag of the table's
digest, so the compare-and-set script touches one hash slot:

- ``…:slots:{<digest>}:table``   hash ``version``, ``limit``, ``holders``, ``reserved``;
- ``…:slots:{<digest>}:fifo``    list of waiting entries, head first;
- ``…:slots:{<digest>}:parked``  hash carrier id → the carrier's fields as JSON.

A read is one round trip (the version first, so any later write makes the compare-and-set
fail); a write is one ``slot_write.lua`` that applies the domain's change only at the version
read. A write that leaves the table idle deletes its FIFO and parked keys and keeps only the
table's version, for ``IDLE_TABLE_TTL_MS``: tables of key values no longer used go, and the
version never goes back while a reader could still hold an older one.

The deployment-wide listing ``{ns}:slot-tables`` (member: tenant and table, score: the last
write) is written in the same round trip as an active table's write, before it on the wire;
the sweeper tolerates idle and dangling members and unlists them with a conditional script.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as redis
from redis.exceptions import NoScriptError

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.adapters.redis.tick_pipeline import tick_pipeline
from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.ports import ActiveTable, SlotRead
from plaita.application.tenancy import current_tenant
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.slots import FIFO_HEAD, SlotChange, SlotTable, SlotTableId, Waiter

#: How long an idle table keeps its version before its key expires.
IDLE_TABLE_TTL_MS = 24 * 3600 * 1000


class RedisSlotTables:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._write = client.register_script(read_script("slot_write"))
        self._forget = client.register_script(read_script("slot_index_forget"))
        self._tick = tick_pipeline(client)

    def _table_keys(self, table: SlotTableId) -> list[str]:
        return [
            self._keys.slot_table(table),
            self._keys.slot_fifo(table),
            self._keys.slot_parked(table),
        ]

    async def read(self, table: SlotTableId, *, carrier_id: str | None = None) -> SlotRead:
        record, fifo, parked = self._table_keys(table)

        def queue(pipe: Any) -> None:
            pipe.hmget(record, "version", "limit", "holders", "reserved")
            pipe.lrange(fifo, 0, FIFO_HEAD - 1)
            pipe.llen(fifo)
            if carrier_id is not None:
                pipe.hexists(parked, carrier_id)

        replies = await self._tick.run(queue)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        (version, limit, holders, reserved), head, length = replies[:3]
        snapshot = SlotTable(
            version=int(version or 0),
            limit=None if limit is None else int(limit),
            holders=SlotTable.decode_holders(None if holders is None else text(holders)),
            reserved=SlotTable.decode_reserved(None if reserved is None else text(reserved)),
            head=tuple(Waiter.decode(text(entry)) for entry in head),
            waiting=int(length),
        )
        return SlotRead(snapshot, carrier_parked=carrier_id is not None and bool(replies[3]))

    async def write(
        self,
        table: SlotTableId,
        change: SlotChange,
        *,
        version: int,
        appended: TaskEnvelope | None = None,
        now_ms: int,
    ) -> bool:
        new = change.table
        append = change.append
        document = "" if appended is None else json.dumps(encode_envelope(appended))
        args: list[Any] = [
            version,
            new.limit or 0,
            new.encode_holders(),
            new.encode_reserved(),
            len(change.take),
            *(waiter.encode() for waiter in change.take),
            len(change.push_front),
            *(waiter.encode() for waiter in change.push_front),
            "" if append is None else append.encode(),
            "" if append is None else append.carrier_id,
            document,
            len(change.forget),
            *change.forget,
            IDLE_TABLE_TTL_MS if new.idle else 0,
        ]
        keys = self._table_keys(table)
        listing = self._keys.slot_tables()
        member = _member(current_tenant(), table)
        active = not new.idle
        command = ("EVALSHA", self._write.sha, len(keys), *keys, *args)

        def queue(pipe: Any) -> None:
            if active:
                pipe.zadd(listing, {member: now_ms})
            pipe.execute_command(*command)

        replies = await self._tick.run(queue)
        reply = replies[-1]
        if isinstance(reply, NoScriptError):
            await self._client.script_load(self._write.script)
            reply = await self._tick.command(*command)
        for failed in replies:
            if isinstance(failed, Exception) and not isinstance(failed, NoScriptError):
                raise failed
        written, _length = reply
        return int(written) == 1

    async def parked(
        self, table: SlotTableId, carrier_ids: Sequence[str]
    ) -> Mapping[str, TaskEnvelope]:
        ids = list(dict.fromkeys(carrier_ids))
        if not ids:
            return {}
        documents = await self._client.hmget(self._keys.slot_parked(table), ids)
        return {
            carrier_id: decode_envelope(json.loads(text(document)))
            for carrier_id, document in zip(ids, documents, strict=True)
            if document is not None
        }

    async def active(self, *, offset: int, limit: int) -> Sequence[ActiveTable]:
        listed: Any = await self._client.zrange(
            self._keys.slot_tables(), offset, offset + limit - 1, withscores=True
        )
        found = []
        for member, score in listed:
            tenant_id, encoded = json.loads(text(member))
            found.append(ActiveTable(tenant_id, SlotTableId.decode(encoded), int(score)))
        return found

    async def forget_idle(self, active: ActiveTable) -> bool:
        member = _member(active.tenant_id, active.table)
        removed = await self._forget(
            keys=[self._keys.slot_tables()], args=[member, active.written_ms]
        )
        return int(removed) == 1


def _member(tenant_id: str, table: SlotTableId) -> str:
    return json.dumps([tenant_id, table.encode()], separators=(",", ":"))
