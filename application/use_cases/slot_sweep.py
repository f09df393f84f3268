"""The slot sweep (E1a, ADR 0030): frees the slots of workers that died, hands them on.

A worker that dies holding a slot stops renewing it; a promoted carrier that was never
enqueued (its worker died between the release and the enqueue) keeps a reservation nobody
uses. Both lapse on their own; the sweep visits the listed tables, lets the domain drop what
expired, puts lapsed reservations back at the head of the FIFO and promotes into the room,
then enqueues the promoted carriers. Bounded per run; the listing is walked round by round.
"""

from __future__ import annotations

import logging

from plaita.application.ports import Clock, SlotTables, TaskQueue, WaitingNotes
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.step.slots import SlotGate

log = logging.getLogger("plaita.worker.slots")

#: How many tables one sweep visits at most.
SWEEP_BATCH = 100


class SweepSlots:
    def __init__(
        self,
        *,
        slots: SlotTables,
        waiting: WaitingNotes,
        queue: TaskQueue,
        clock: Clock,
        lease_ttl_ms: int,
        batch: int = SWEEP_BATCH,
    ) -> None:
        self._slots = slots
        self._queue = queue
        self._gate = SlotGate(slots=slots, waiting=waiting, clock=clock, hold_ms=lease_ttl_ms)
        self._batch = batch
        self._offset = 0

    async def __call__(self) -> int:
        """Sweep the next batch of listed tables; how many carriers were promoted."""
        listed = await self._slots.active(offset=self._offset, limit=self._batch)
        self._offset = 0 if len(listed) < self._batch else self._offset + len(listed)
        promoted = 0
        for active in listed:
            with tenant_scope(active.tenant_id):
                for envelope in await self._gate.sweep(active.table):
                    await self._queue.enqueue(envelope)
                    promoted += 1
                if (await self._slots.read(active.table)).table.idle:
                    await self._slots.forget_idle(active)
        if promoted:
            log.info(
                "event=slots.swept tables=%d promoted=%d: freed slots were handed to waiting "
                "carriers",
                len(listed),
                promoted,
            )
        return promoted
