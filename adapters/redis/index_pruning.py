"""Dead members of the event, subscription and executions indexes, pruned on read and by the
janitor (V7, S1).

An index member is dead when its record is gone: an event record expired (7 days), a
subscription record was evicted or deleted by hand, an execution's state expired after its
retention (S5). Listings skip dead members and prune the ones they met; the janitor walks
every index of a store a bounded budget at a time.

An index and the records its members name live in different hash slots (Redis Cluster), so
no script may check a record and change the index at once. A prune is three steps, each a
pipeline of commands on one key apiece (one round trip on a single node, one per node
touched on a cluster):

1. the candidates' records are read, and the ids without one kept: a listing has read them
   already, the janitor sends one ``EXISTS`` per member of its batch;
2. ``index_prune.lua``, on the index alone, removes those ids, at most ``PRUNE_BATCH`` per
   call, and answers the score each had;
3. the records of the removed ids are read again. An id whose record exists again was
   written back between steps 1 and 2: it is put back with the score it had (``ZADD NX``:
   an entry a writer made meanwhile wins), and its index registered again.

Writers write a record before its index entry, so when step 2 removed an entry a writer had
just made, that writer's record was already there, and step 3 sees it. A crash between the
steps leaves a dead member for the next prune (after step 1), or, only if a writer rewrote
that very id within those milliseconds, one entry of a live record removed (after step 2).

Each store keeps a registry set of its index keys; the janitor walks the registry instead of
SCANning the keyspace, whose cost grows with every execution key of the deployment. When the
janitor finds an index gone (emptied, or expired with its TTL) it takes it off the registry,
then looks again and registers it back if a writer made it meanwhile: writers add an index
entry before they register its index. Listings never touch the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis.asyncio as redis
from redis.exceptions import NoScriptError

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
        """Remove from ``index`` those of ``ids`` the caller found without a record (steps 2
        and 3 above); how many are gone from it."""
        if not ids:
            return 0
        removed = await self._remove(index, ids)
        if not removed:
            return 0
        restored = await self._restore_rewritten(index, removed)
        return len(removed) - restored

    async def _remove(self, index: str, ids: Sequence[str]) -> dict[str, float]:
        """Step 2: the script on every batch of ``ids``, in one pipeline; id -> removed score.

        A server that has not seen the script yet (first call, restart, failover) answers
        NOSCRIPT: the script is loaded and the batches that got that answer are sent again.
        """
        batches = prune_batches(ids)
        pending = list(range(len(batches)))
        removed: dict[str, float] = {}
        for attempt in (1, 2):
            async with self._client.pipeline(transaction=False) as pipe:
                for number in pending:
                    # execute_command, not the script object: redis-py's cluster pipeline
                    # refuses pipe.evalsha and routes this by its one key.
                    pipe.execute_command("EVALSHA", self._script.sha, 1, index, *batches[number])
                replies = await pipe.execute(raise_on_error=False)
            unloaded: list[int] = []
            for number, reply in zip(pending, replies, strict=True):
                if isinstance(reply, NoScriptError) and attempt == 1:
                    unloaded.append(number)
                elif isinstance(reply, Exception):
                    raise reply
                else:
                    pairs = [text(item) for item in reply]
                    removed.update(zip(pairs[::2], map(float, pairs[1::2]), strict=True))
            if not unloaded:
                break
            await self._client.script_load(self._script.script)
            pending = unloaded
        return removed

    async def _restore_rewritten(self, index: str, removed: dict[str, float]) -> int:
        """Step 3: put back the removed ids whose record exists again; how many."""
        alive = set(await self._with_record(index, list(removed)))
        if not alive:
            return 0
        await self._client.zadd(index, {i: removed[i] for i in alive}, nx=True)
        await self._client.sadd(self._registry, index)
        return len(alive)

    async def _with_record(self, index: str, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` whose record exists: one EXISTS each, in one pipeline."""
        async with self._client.pipeline(transaction=False) as pipe:
            for member in ids:
                pipe.exists(self._record_key(index, member))
            found = await pipe.execute()
        return [member for member, count in zip(ids, found, strict=True) if int(count)]

    async def _forget(self, index: str) -> None:
        """Take a vanished index off the registry, unless a writer made it again meanwhile."""
        await self._client.srem(self._registry, index)
        if await self._client.exists(index):
            await self._client.sadd(self._registry, index)

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
                if self._offset == 0:
                    # No first member: the index is gone (emptied, or expired with its TTL).
                    await self._forget(index)
                self._current = None
                continue
            alive = set(await self._with_record(index, ids))
            pruned = await self.prune(index, [i for i in ids if i not in alive])
            examined += len(ids)
            removed += pruned
            # The pruned members were before the next unvisited one: its rank fell by as many.
            self._offset += len(ids) - pruned
            if len(ids) < want:
                self._current = None
        return removed
