"""In-memory twin of the Redis slot tables (E1a concurrency keys, tenant quotas).

Each table is kept as Redis keeps it: a record (version, limit, holders, reservations), a
FIFO of entries and a map of parked envelopes (encoded, as on Redis); a write applies the
domain's change only at the version it read. The listing for the sweeper is a map of
(tenant, table) → last write time, like the Redis sorted set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.ports import ActiveTable, SlotRead
from plaita.application.tenancy import current_tenant
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.slots import FIFO_HEAD, SlotChange, SlotTable, SlotTableId, Waiter

_Key = tuple[str, SlotTableId]


@attrs.define
class _Stored:
    table: SlotTable = attrs.field(factory=SlotTable)
    fifo: list[Waiter] = attrs.field(factory=list)
    parked: dict[str, dict[str, str]] = attrs.field(factory=dict)


class MemorySlotTables:
    def __init__(self) -> None:
        self._tables: dict[_Key, _Stored] = {}
        self._listed: dict[_Key, int] = {}

    async def read(self, table: SlotTableId, *, carrier_id: str | None = None) -> SlotRead:
        stored = self._tables.get((current_tenant(), table), _Stored())
        snapshot = attrs.evolve(
            stored.table, head=tuple(stored.fifo[:FIFO_HEAD]), waiting=len(stored.fifo)
        )
        return SlotRead(snapshot, carrier_parked=carrier_id in stored.parked)

    async def write(
        self,
        table: SlotTableId,
        change: SlotChange,
        *,
        version: int,
        appended: TaskEnvelope | None = None,
        now_ms: int,
    ) -> bool:
        key = (current_tenant(), table)
        stored = self._tables.setdefault(key, _Stored())
        if stored.table.version != version:
            return False
        new = change.table
        stored.table = SlotTable(
            version=version + 1, limit=new.limit, holders=new.holders, reserved=new.reserved
        )
        for waiter in change.take:
            if waiter in stored.fifo:
                stored.fifo.remove(waiter)
        stored.fifo[:0] = change.push_front
        if change.append is not None:
            stored.fifo.append(change.append)
            if appended is not None:
                stored.parked[change.append.carrier_id] = encode_envelope(appended)
        for carrier_id in change.forget:
            stored.parked.pop(carrier_id, None)
        if new.idle:
            # Like Redis: an idle table keeps only its version (expiry left to Redis).
            self._tables[key] = _Stored(SlotTable(version=version + 1))
        else:
            self._listed[key] = now_ms
        return True

    async def parked(
        self, table: SlotTableId, carrier_ids: Sequence[str]
    ) -> Mapping[str, TaskEnvelope]:
        stored = self._tables.get((current_tenant(), table), _Stored())
        return {
            carrier_id: decode_envelope(stored.parked[carrier_id])
            for carrier_id in carrier_ids
            if carrier_id in stored.parked
        }

    async def active(self, *, offset: int, limit: int) -> Sequence[ActiveTable]:
        ordered = sorted(self._listed.items(), key=lambda item: (item[1], item[0][1].encode()))
        return [
            ActiveTable(tenant_id, table, written_ms)
            for (tenant_id, table), written_ms in ordered[offset : offset + limit]
        ]

    async def forget_idle(self, active: ActiveTable) -> bool:
        key = (active.tenant_id, active.table)
        if self._listed.get(key) != active.written_ms:
            return False
        del self._listed[key]
        return True
