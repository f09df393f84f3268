"""Slot tables (E1a concurrency keys, tenant quotas): the table a worker's dispatch takes a
slot from, and the carriers waiting in its FIFO."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from plaita.domain.envelope import TaskEnvelope
from plaita.domain.slots import SlotChange, SlotTable, SlotTableId


@attrs.frozen
class ActiveTable:
    """A table that had holders or waiters when last written, for the sweeper."""

    tenant_id: str
    table: SlotTableId
    #: When it was last written (the listing's score): ``forget_idle`` compares it.
    written_ms: int


@attrs.frozen
class SlotRead:
    """A table's snapshot, and whether the carrier asked about is parked in it."""

    table: SlotTable
    #: The carrier asked about is kept by this table (waiting, or promoted).
    carrier_parked: bool = False


class SlotTables(Protocol):
    """Slot tables of the current tenant, each one atomic unit (one hash slot on Redis).

    Every rule is ``plaita.domain.slots``'s: an adapter reads a snapshot, and writes the
    domain's change only if the table's version is still the one it read. A snapshot also
    serves the console: its holders, its limit and how many wait.
    """

    async def read(self, table: SlotTableId, *, carrier_id: str | None = None) -> SlotRead:
        """The snapshot (version 0 and empty if it never existed) and ``carrier_id``'s park.

        The snapshot holds the FIFO's first ``FIFO_HEAD`` entries and its whole length.
        """
        ...

    async def write(
        self,
        table: SlotTableId,
        change: SlotChange,
        *,
        version: int,
        appended: TaskEnvelope | None = None,
        now_ms: int,
    ) -> bool:
        """Write ``change`` iff the table is still at ``version``; False when another won.

        The table is then at ``version + 1``. ``appended`` is the envelope of
        ``change.append``, parked with it. A table left with holders or waiters is listed
        for the sweeper at ``now_ms`` (before the write: a listed table may be idle).
        """
        ...

    async def parked(
        self, table: SlotTableId, carrier_ids: Sequence[str]
    ) -> Mapping[str, TaskEnvelope]:
        """The parked envelopes of those carriers that are kept (promoted ones included)."""
        ...

    async def active(self, *, offset: int, limit: int) -> Sequence[ActiveTable]:
        """At most ``limit`` listed tables of every tenant from position ``offset``.

        Least recently written first; a listed table may be idle by now.
        """
        ...

    async def forget_idle(self, active: ActiveTable) -> bool:
        """Unlist an idle table, unless it was written since ``active.written_ms``."""
        ...
