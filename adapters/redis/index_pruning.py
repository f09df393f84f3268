"""Dead members of the event and subscription indexes, pruned on read and by the janitor (V7).

An index member is dead when its record is gone: an event record expired (7 days), a
subscription record was evicted or deleted by hand, an execution's state expired after its
retention (S5). Listings skip dead members and prune the
ones they met; the janitor walks every index of a store a bounded budget at a time. Both
prune through one script (``index_prune.lua``) that re-checks each record inside Redis, so a
record written again since it was read keeps its index entry, and removes at most
``PRUNE_BATCH`` members per call.

Each store keeps a registry set of its index keys that exist; the janitor walks the registry
instead of SCANning the keyspace, whose cost grows with every execution key of the
deployment. A script that empties an index, or finds it expired, takes it off the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis.asyncio as redis

from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.domain.janitor import PRUNE_BATCH, prune_batches

#: Registry members one SSCAN asks for; the registry holds index key names, a few bytes each.
_REGISTRY_SCAN_COUNT = 100

#: The key of the record an index member names: (index key, member) -> record key.
RecordKey = Callable[[str, str], str]


def in_every_index(record_key: Callable[[str], str]) -> RecordKey:
    """For stores whose members name the same record whatever index holds them."""
    return lambda _index, member: record_key(member)


class IndexPruner:
    """Prunes one store's indexes; keeps the janitor's position between ticks."""

    def __init__(self, client: redis.Redis, *, registry: str, record_key: RecordKey) -> None:
        self._client = client
        self._registry = registry
        self._record_key = record_key
        self._script = client.register_script(read_script("index_prune"))
        # Where the janitor stands: the registry's SSCAN cursor, the index keys of the last
        # SSCAN page still to visit, the index being walked and the rank reached in it.
        self._scan_cursor = 0
        self._pending: list[str] = []
        self._current: str | None = None
        self._offset = 0

    async def prune(self, index: str, ids: Sequence[str]) -> int:
        """Remove those of ``ids`` whose record is gone from ``index``; how many were removed."""
        removed = 0
        for batch in prune_batches(ids):
            removed += await self._prune_batch(index, batch)
        return removed

    async def _prune_batch(self, index: str, ids: Sequence[str]) -> int:
        reply = await self._script(
            keys=[index, self._registry, *(self._record_key(index, i) for i in ids)],
            args=list(ids),
        )
        return int(reply)

    async def sweep(self, *, budget: int) -> int:
        """Examine at most ``budget`` index members where the last sweep stopped; removed count.

        One call walks the registry at most once around, so a store whose indexes hold only
        live members returns 0 after a bounded number of commands.
        """
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(
                f"a prune budget is a whole number of index members >= 1, got {budget!r}"
            )
        examined = removed = 0
        began_pass = False
        while examined < budget:
            if self._current is None:
                if not self._pending:
                    if self._scan_cursor == 0:
                        if began_pass:
                            break
                        began_pass = True
                    cursor, members = await self._client.sscan(
                        self._registry, self._scan_cursor, count=_REGISTRY_SCAN_COUNT
                    )
                    self._scan_cursor = int(cursor)
                    self._pending = [text(member) for member in members]
                    continue
                self._current, self._offset = self._pending.pop(), 0
            index = self._current
            want = min(PRUNE_BATCH, budget - examined)
            ids = [
                text(member)
                for member in await self._client.zrange(
                    index, self._offset, self._offset + want - 1
                )
            ]
            if not ids:
                # Walked to the end, or the index expired: a script with no candidates only
                # takes a vanished index off the registry.
                await self._prune_batch(index, [])
                self._current = None
                continue
            pruned = await self._prune_batch(index, ids)
            examined += len(ids)
            removed += pruned
            # The pruned members were before the next unvisited one: its rank fell by as many.
            self._offset += len(ids) - pruned
            if len(ids) < want:
                self._current = None
        return removed
