"""Reading the ``{ns}:executions`` index: listing, paging and pruning (S1, S5, C1).

The index holds every execution id of a tenant, scored by its last update. Its members live
in other hash slots than their states, so a page of them is read with a pipeline, not one
snapshot, and an id whose state is gone (expired after the retention, deleted, a rejected
save) is taken out of the index after the walk by the index pruner (``index_pruning``): a
script on the index alone removes it, then the state is read again, and an id whose state
was saved meanwhile is put back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.index_pruning import IndexPruner
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text, text_fields
from plaita.application.ports import PAGE_SCAN_BUDGET, ExecutionPage
from plaita.domain.checkpoint import state_from_parts
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery
from plaita.domain.operator_controls import PageCursor, check_page_limit

#: A filtered listing reads the index at least this many ids at a time.
LIST_PAGE = 100
#: State keys read per round of a reindex.
REINDEX_BATCH = 500


def _id_of(state_key: str) -> str:
    """The execution id in ``…:x:{<execution_id>}:state``."""
    return state_key[state_key.index("{") + 1 : state_key.rindex("}")]


def queue_reads(pipe: Any, keys: RedisKeys, execution_id: str) -> None:
    """Queue the reads of one execution's three hashes (header, nodes, variables)."""
    for key in checkpoint_keys(keys, execution_id):
        pipe.hgetall(key)


def checkpoint_keys(keys: RedisKeys, execution_id: str) -> list[str]:
    """The keys of one execution's three hashes (header, nodes, variables), in that order."""
    return [
        keys.execution_state(execution_id),
        keys.execution_nodes(execution_id),
        keys.execution_vars(execution_id),
    ]


def assemble_read(reply: Any) -> ExecutionState | None:
    """The state from ``read_checkpoint``'s reply (``checkpoint_read.lua``): three flat
    field, value lists; None when it has no header."""
    header, nodes, variables = (_pairs_of(part) for part in reply)
    return assemble(header, nodes, variables)


def _pairs_of(flat: Any) -> dict[Any, Any]:
    items = list(flat or [])
    return dict(zip(items[::2], items[1::2], strict=True))


def assemble(header: Any, nodes: Any, variables: Any) -> ExecutionState | None:
    """The state from the replies of ``queue_reads``; None when it has no header."""
    if not header:
        return None
    return state_from_parts(text_fields(header), text_fields(nodes), text_fields(variables))


class ExecutionIndexReads:
    """``list``, ``page`` and the janitor's sweep over the executions index: the reads of
    ``RedisExecutionRepository``, which the repository inherits."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._pruner = IndexPruner(
            client, registry=keys.execution_indexes(), record_key=keys.execution_state_in
        )

    async def reindex(self) -> int:
        """ExecutionRepository.reindex: SCAN the tenant's state keys (on every node of a
        cluster), ``ZADD NX`` each id with its stored ``updated_at_ms``; a batch of 500 keys
        is one pipelined read and one write. Entries that exist keep their score."""
        index = self._keys.executions()
        pattern = self._keys.execution_state("*")
        added = 0
        batch: list[str] = []
        async for key in self._client.scan_iter(match=pattern, count=REINDEX_BATCH):
            batch.append(text(key))
            if len(batch) >= REINDEX_BATCH:
                added += await self._reindex(index, batch)
                batch = []
        if batch:
            added += await self._reindex(index, batch)
        return added

    async def _reindex(self, index: str, state_keys: list[str]) -> int:
        async with self._client.pipeline(transaction=False) as pipe:
            for key in state_keys:
                pipe.hget(key, "updated_at_ms")
            stamps = await pipe.execute()
        scores = {
            _id_of(key): int(text(stamp))
            for key, stamp in zip(state_keys, stamps, strict=True)
            if stamp is not None
        }
        if not scores:
            return 0
        added = await self._client.zadd(index, scores, nx=True)
        return int(added or 0)

    async def list(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 100,
    ) -> Sequence[ExecutionState]:
        found: list[ExecutionState] = []
        dead: list[str] = []
        start = 0
        page = limit if flow_id is None and status is None else max(limit, LIST_PAGE)
        while len(found) < limit:
            ids = [
                text(member)
                for member in await self._client.zrevrange(
                    self._keys.executions(), start, start + page - 1
                )
            ]
            if not ids:
                break
            # The ids live in different hash slots, so the page is read without MULTI: each
            # execution's three hashes are read back to back, but not as one snapshot.
            async with self._client.pipeline(transaction=False) as pipe:
                for execution_id in ids:
                    queue_reads(pipe, self._keys, execution_id)
                replies = await pipe.execute()
            for index, execution_id in enumerate(ids):
                state = assemble(*replies[3 * index : 3 * index + 3])
                if state is None:
                    dead.append(execution_id)  # expired, deleted, or a rejected save
                elif (flow_id is None or state.flow_id == flow_id) and (
                    status is None or state.status is status
                ):
                    found.append(state)
            start += page
        await self._prune(dead)
        return found[:limit]

    async def _prune(self, dead: Sequence[str]) -> None:
        """Take the ids a listing found without a state out of the index (S1); after the
        walk, so the walk's offsets stay true."""
        if dead:
            await self._pruner.prune(self._keys.executions(), dead)

    async def prune_indexes(self, *, budget: int) -> int:
        """IndexJanitor: walk every tenant's executions index ``budget`` members at a time
        and remove the ids whose state is gone (expired after the retention, S5)."""
        return await self._pruner.sweep(budget=budget)

    async def page(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        query: ExecutionQuery = EVERY_EXECUTION,
    ) -> ExecutionPage:
        """ExecutionRepository.page: batches of the index below the cursor, filtered here (C1)."""
        check_page_limit(limit)
        where = query.narrowed(flow_id=flow_id, status=status)
        after = None if cursor is None else PageCursor.decode(cursor)
        top: float | str = "+inf" if after is None else after.score
        batch = limit if where == EVERY_EXECUTION else max(limit, LIST_PAGE)
        key = self._keys.executions()
        items: list[ExecutionState] = []
        dead: list[str] = []
        examined, offset = 0, 0
        last: tuple[int, str] | None = None
        while True:
            # Offsets count from the cursor's score, fixed for this call: entries written
            # meanwhile get a higher score and land above it, never inside the walk.
            replies: list[Any] = await self._client.zrevrangebyscore(
                key, top, "-inf", start=offset, num=batch, withscores=True
            )
            offset += len(replies)
            # The cursor's own entry and its ties come first (same score, ids not below it).
            pairs = [(int(score), text(member)) for member, score in replies]
            entries = [e for e in pairs if after is None or after.precedes(*e)]
            skipped = len(pairs) - len(entries)
            loaded: list[Any] = []
            if entries:
                async with self._client.pipeline(transaction=False) as pipe:
                    for _, execution_id in entries:
                        queue_reads(pipe, self._keys, execution_id)
                    loaded = await pipe.execute()
            stopped_at = None
            for index, entry in enumerate(entries):
                examined, last = examined + 1, entry
                state = assemble(*loaded[3 * index : 3 * index + 3])
                if state is None:
                    dead.append(entry[1])
                elif where.matches(state):
                    items.append(state)
                if len(items) == limit or examined >= PAGE_SCAN_BUDGET:
                    stopped_at = skipped + index
                    break
            if stopped_at is not None:
                more = stopped_at + 1 < len(pairs) or (
                    len(pairs) == batch
                    and bool(
                        await self._client.zrevrangebyscore(key, top, "-inf", start=offset, num=1)
                    )
                )
                break
            if len(pairs) < batch:
                more = False  # the index ends here
                break
        await self._prune(dead)
        next_cursor = PageCursor(*last).encode() if more and last is not None else None
        return ExecutionPage(tuple(items), next_cursor)
