"""Execution checkpoints on SQL: fenced incremental saves, deletes with tombstones, listings
(S1, S3, S4, W4, W13, W15, W24).

Same observable behaviour as the Redis repository and the memory twin, on the tables of
``schema``: every write is fenced by a conditional UPDATE of the lease row (``fencing``) in
the transaction that writes; a delete removes the state, its heartbeat and the lease holder
and writes the tombstone in one transaction. Records with a TTL on Redis (tombstones,
heartbeats, a terminal state's retention, S5) carry an expiry read against the injected
clock; ``sweep_expired`` removes them for good.

The budget counters and the operator controls live on the queue's backend, not here: a
delete removes both right after its transaction, and a checkpoint that changes the
execution's lifetime changes the controls' right after its own (the counters keep their
sliding TTL of their own).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from plaita.adapters.sqlalchemy import history as history_rows
from plaita.adapters.sqlalchemy.checkpoints import (
    alive,
    is_incremental,
    read_states,
    write_full,
    write_step,
)
from plaita.adapters.sqlalchemy.engine import reader, transaction, writer
from plaita.adapters.sqlalchemy.fencing import (
    claim_fence,
    ensure_lease_row,
    key,
    live_tombstone,
    refuse_if_deleted,
    revoke,
    upsert,
)
from plaita.adapters.sqlalchemy.schema import executions, heartbeats, leases, tombstones
from plaita.application.ports import (
    PAGE_SCAN_BUDGET,
    Clock,
    ExecutionControls,
    ExecutionPage,
    NodeHeartbeat,
)
from plaita.application.tenancy import current_tenant
from plaita.domain.checkpoint import checkpoint_delta
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery
from plaita.domain.history import (
    DEFAULT_HISTORY_PAGE,
    HISTORY_CAP,
    HistoryEntry,
    HistoryPage,
    check_history_cap,
    check_history_cursor,
    check_history_limit,
)
from plaita.domain.operator_controls import PageCursor, check_page_limit
from plaita.domain.retention import DEFAULT_RETENTION_MS, Lifetime, check_retention_ms
from plaita.domain.tenancy import check_same_tenant
from plaita.domain.tombstone import Tombstone

#: Three lease TTLs of the default 120 s lease: the record outlives the reaper's window.
DEFAULT_HEARTBEAT_TTL_MS = 360_000
#: Rows a page with input conditions reads at a time (``PAGE_SCAN_BUDGET`` bounds the call).
SCAN_BATCH = 100


class ForgetsCounters(Protocol):
    """The part of a counter store a delete needs: the counters live in another store."""

    async def forget(self, execution_id: str) -> None: ...


class SqlExecutionRepository:
    """ExecutionRepository on SQLite or PostgreSQL."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        clock: Clock,
        counters: ForgetsCounters | None = None,
        controls: ExecutionControls | None = None,
        heartbeat_ttl_ms: int = DEFAULT_HEARTBEAT_TTL_MS,
        retention_ms: int = DEFAULT_RETENTION_MS,
        history_cap: int = HISTORY_CAP,
    ) -> None:
        _check_positive("a heartbeat ttl", heartbeat_ttl_ms)
        self._writer = writer(engine)
        self._reader = reader(engine)
        self._clock = clock
        self._counters = counters
        self._controls = controls
        self._heartbeat_ttl_ms = heartbeat_ttl_ms
        self._retention_ms = check_retention_ms(retention_ms)
        self._history_cap = check_history_cap(history_cap)

    # --- reads --------------------------------------------------------------------------

    async def load(self, execution_id: str) -> ExecutionState | None:
        tenant_id = current_tenant()
        query = sa.select(executions).where(
            key(executions, tenant_id, execution_id), alive(self._clock.now_ms())
        )
        async with transaction(self._reader) as connection:
            header = (await connection.execute(query)).first()
            if header is None:
                return None
            (state,) = await read_states(connection, tenant_id, [header])
        return state

    async def list(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 100,
    ) -> Sequence[ExecutionState]:
        tenant_id = current_tenant()
        if limit <= 0:
            return []
        query = self._listing(tenant_id, flow_id, status).limit(limit)
        async with transaction(self._reader) as connection:
            headers = (await connection.execute(query)).all()
            return await read_states(connection, tenant_id, headers)

    async def reindex(self) -> int:
        """ExecutionRepository.reindex: the rows are the index (one table, one transaction per
        write), so nothing is ever missing from it."""
        return 0

    async def page(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        query: ExecutionQuery = EVERY_EXECUTION,
    ) -> ExecutionPage:
        """ExecutionRepository.page in the order of the Redis index (C1).

        Flow, status and the creation window run in the query, on the index of the filtered
        columns, so such a call's work is bounded by ``limit`` and every page but the last
        is full. Input conditions are read from the rows, in batches, at most
        ``PAGE_SCAN_BUDGET`` rows a call, as the Redis store does.
        """
        check_page_limit(limit)
        where = query.narrowed(flow_id=flow_id, status=status)
        after = None if cursor is None else PageCursor.decode(cursor)
        tenant_id = current_tenant()
        select = self._listing(tenant_id, where.flow_id, where.status)
        if where.created_from_ms is not None:
            select = select.where(executions.c.created_at_ms >= where.created_from_ms)
        if where.created_to_ms is not None:
            select = select.where(executions.c.created_at_ms <= where.created_to_ms)
        async with transaction(self._reader) as connection:
            if where.input_conditions:
                return await self._scan(connection, tenant_id, select, where, limit, after)
            headers = (await connection.execute(_below(select, after).limit(limit + 1))).all()
            states = await read_states(connection, tenant_id, headers[:limit])
        if len(headers) <= limit:
            return ExecutionPage(tuple(states))
        last = headers[limit - 1]
        return ExecutionPage(
            tuple(states), PageCursor(last.updated_at_ms, last.execution_id).encode()
        )

    async def _scan(
        self,
        connection: AsyncConnection,
        tenant_id: str,
        select: sa.Select[tuple[object, ...]],
        where: ExecutionQuery,
        limit: int,
        after: PageCursor | None,
    ) -> ExecutionPage:
        """``page`` for filters the rows answer: batches below the cursor, bounded work."""
        batch = max(limit, SCAN_BATCH)
        items: list[ExecutionState] = []
        examined = 0
        while True:
            rows = (await connection.execute(_below(select, after).limit(batch + 1))).all()
            states = await read_states(connection, tenant_id, rows[:batch])
            for index, state in enumerate(states):
                examined += 1
                after = PageCursor(rows[index].updated_at_ms, rows[index].execution_id)
                if where.matches(state):
                    items.append(state)
                if len(items) == limit or examined >= PAGE_SCAN_BUDGET:
                    more = index + 1 < len(rows)
                    return ExecutionPage(tuple(items), after.encode() if more else None)
            if len(rows) <= batch:
                return ExecutionPage(tuple(items))

    def _listing(
        self, tenant_id: str, flow_id: str | None, status: ExecutionStatus | None
    ) -> sa.Select[tuple[object, ...]]:
        """Newest first, then id descending: the order of ZREVRANGE on the Redis index."""
        query = sa.select(executions).where(
            executions.c.tenant_id == tenant_id, alive(self._clock.now_ms())
        )
        if flow_id is not None:
            query = query.where(executions.c.flow_id == flow_id)
        if status is not None:
            query = query.where(executions.c.status == status.value)
        return query.order_by(executions.c.updated_at_ms.desc(), executions.c.execution_id.desc())

    async def history(
        self, execution_id: str, *, after: int | None = None, limit: int = DEFAULT_HISTORY_PAGE
    ) -> HistoryPage:
        check_history_limit(limit)
        check_history_cursor(after)
        tenant_id = current_tenant()
        stored = sa.select(
            sa.exists().where(key(executions, tenant_id, execution_id), alive(self._clock.now_ms()))
        )
        async with transaction(self._reader) as connection:
            # A state past its retention reads as absent, and so does its history.
            if not await connection.scalar(stored):
                return HistoryPage((), None, 0)
            return await history_rows.read(
                connection, tenant_id, execution_id, after=after, limit=limit
            )

    async def append_history(self, execution_id: str, entries: Sequence[HistoryEntry]) -> None:
        if not entries:
            return
        tenant_id = current_tenant()
        now_ms = self._clock.now_ms()
        stored = sa.select(
            sa.exists().where(key(executions, tenant_id, execution_id), alive(now_ms))
        )
        async with transaction(self._writer) as connection:
            # Lock the lease row, as every fenced write does, so the seqs never race.
            await connection.execute(
                sa.update(leases)
                .where(key(leases, tenant_id, execution_id))
                .values(generation=leases.c.generation)
            )
            if await connection.scalar(stored):
                await history_rows.append(
                    connection, tenant_id, execution_id, entries, cap=self._history_cap
                )

    async def tombstone(self, execution_id: str) -> Tombstone | None:
        tenant_id = current_tenant()
        query = sa.select(tombstones.c.document).where(
            key(tombstones, tenant_id, execution_id),
            tombstones.c.expires_at_ms > self._clock.now_ms(),
        )
        async with transaction(self._reader) as connection:
            document = await connection.scalar(query)
        return None if document is None else Tombstone.from_json(json.loads(document))

    async def last_heartbeat(self, execution_id: str) -> NodeHeartbeat | None:
        tenant_id = current_tenant()
        query = sa.select(heartbeats.c.node_id, heartbeats.c.last_update_ms).where(
            key(heartbeats, tenant_id, execution_id),
            heartbeats.c.expires_at_ms > self._clock.now_ms(),
        )
        async with transaction(self._reader) as connection:
            row = (await connection.execute(query)).first()
        return None if row is None else NodeHeartbeat(row.node_id, row.last_update_ms)

    # --- writes -------------------------------------------------------------------------

    async def save(
        self,
        state: ExecutionState,
        *,
        fence: int,
        previous: ExecutionState | None = None,
        history: Sequence[HistoryEntry] = (),
    ) -> None:
        execution_id = state.execution_id
        tenant_id = current_tenant()
        check_same_tenant(state.tenant_id, tenant_id, f"execution {execution_id!r}")
        delta = checkpoint_delta(previous, state)
        now_ms = self._clock.now_ms()
        async with transaction(self._writer) as connection:
            await claim_fence(connection, tenant_id, execution_id, fence)
            if not is_incremental(delta) or not await write_step(
                connection, tenant_id, delta, now_ms=now_ms, retention_ms=self._retention_ms
            ):
                # A full save, or a delta with nothing stored under it: the whole state, as
                # Redis.
                await refuse_if_deleted(connection, tenant_id, execution_id, fence, now_ms)
                delta = delta if delta.full else checkpoint_delta(None, state)
                await write_full(
                    connection, tenant_id, delta, now_ms=now_ms, retention_ms=self._retention_ms
                )
            await history_rows.append(
                connection, tenant_id, execution_id, history, cap=self._history_cap
            )
        if self._controls is not None and delta.lifetime is not Lifetime.KEEP:
            ttl = self._retention_ms if delta.lifetime is Lifetime.EXPIRE else None
            await self._controls.retain(execution_id, ttl_ms=ttl)

    async def accept(self, state: ExecutionState, *, history: Sequence[HistoryEntry] = ()) -> bool:
        execution_id = state.execution_id
        tenant_id = current_tenant()
        check_same_tenant(state.tenant_id, tenant_id, f"execution {execution_id!r}")
        delta = checkpoint_delta(None, state)
        now_ms = self._clock.now_ms()
        async with transaction(self._writer) as connection:
            # The lease row is the execution's lock, as for a delete: a worker's first save or
            # a delete racing this acceptance waits for it, then sees what it wrote.
            await ensure_lease_row(connection, tenant_id, execution_id)
            await connection.execute(
                sa.update(leases)
                .where(key(leases, tenant_id, execution_id))
                .values(generation=leases.c.generation)
            )
            taken = sa.or_(
                live_tombstone(tenant_id, execution_id, now_ms),
                sa.exists().where(key(executions, tenant_id, execution_id), alive(now_ms)),
            )
            if await connection.scalar(sa.select(taken)):
                return False
            await write_full(
                connection, tenant_id, delta, now_ms=now_ms, retention_ms=self._retention_ms
            )
            await history_rows.append(
                connection, tenant_id, execution_id, history, cap=self._history_cap
            )
        return True

    async def heartbeat(self, execution_id: str, *, fence: int, node_id: str, now_ms: int) -> None:
        tenant_id = current_tenant()
        clock_ms = self._clock.now_ms()
        async with transaction(self._writer) as connection:
            await claim_fence(connection, tenant_id, execution_id, fence)
            await refuse_if_deleted(connection, tenant_id, execution_id, fence, clock_ms)
            row = {
                "tenant_id": tenant_id,
                "execution_id": execution_id,
                "node_id": node_id,
                "last_update_ms": now_ms,
                "expires_at_ms": clock_ms + self._heartbeat_ttl_ms,
            }
            statement = upsert(connection, heartbeats).values(row)
            await connection.execute(
                statement.on_conflict_do_update(
                    index_elements=[heartbeats.c.tenant_id, heartbeats.c.execution_id],
                    set_={
                        name: statement.excluded[name]
                        for name in ("node_id", "last_update_ms", "expires_at_ms")
                    },
                )
            )

    async def delete(
        self,
        execution_id: str,
        *,
        fence: int | None,
        tombstone: Tombstone,
        tombstone_ttl_ms: int,
    ) -> Tombstone:
        _check_positive("a tombstone ttl", tombstone_ttl_ms)
        tenant_id = current_tenant()
        now_ms = self._clock.now_ms()
        async with transaction(self._writer) as connection:
            # The lease row is the execution's lock: create it (without a generation) so a
            # start racing this delete waits for it, then sees the tombstone.
            await ensure_lease_row(connection, tenant_id, execution_id)
            if fence is None:
                await revoke(connection, tenant_id, execution_id)
            else:
                await claim_fence(connection, tenant_id, execution_id, fence, release_holder=True)
            # Node and variable rows go with the header row (ON DELETE CASCADE).
            for table in (executions, heartbeats):
                await connection.execute(
                    sa.delete(table).where(key(table, tenant_id, execution_id))
                )
            stored = await self._store_tombstone(
                connection, tenant_id, execution_id, tombstone, now_ms + tombstone_ttl_ms, now_ms
            )
        if self._controls is not None:
            await self._controls.clear(execution_id)
        if self._counters is not None:
            await self._counters.forget(execution_id)
        return stored

    async def _store_tombstone(
        self,
        connection: AsyncConnection,
        tenant_id: str,
        execution_id: str,
        tombstone: Tombstone,
        expires_at_ms: int,
        now_ms: int,
    ) -> Tombstone:
        where = key(tombstones, tenant_id, execution_id)
        query = sa.select(tombstones.c.document, tombstones.c.expires_at_ms).where(where)
        existing = (await connection.execute(query)).first()
        if existing is not None and existing.expires_at_ms > now_ms:
            # A second delete keeps the first record and only ever extends its expiry.
            await connection.execute(
                sa.update(tombstones)
                .where(where, tombstones.c.expires_at_ms < expires_at_ms)
                .values(expires_at_ms=expires_at_ms)
            )
            return Tombstone.from_json(json.loads(existing.document))
        row = {
            "tenant_id": tenant_id,
            "execution_id": execution_id,
            "document": json.dumps(tombstone.to_json(), separators=(",", ":")),
            "expires_at_ms": expires_at_ms,
        }
        statement = upsert(connection, tombstones).values(row)
        await connection.execute(
            statement.on_conflict_do_update(
                index_elements=[tombstones.c.tenant_id, tombstones.c.execution_id],
                set_={name: statement.excluded[name] for name in ("document", "expires_at_ms")},
            )
        )
        return tombstone

    # --- retention ----------------------------------------------------------------------

    async def sweep_expired(self, *, now_ms: int, limit: int) -> int:
        """Remove at most ``limit`` records whose expiry passed: states (with their node and
        variable rows), tombstones and heartbeats; how many were removed.

        Reads already treat these records as absent, so the sweep changes nothing anyone can
        observe; it only reclaims space. It runs for every tenant at once (an operator job,
        not a unit of work of one tenant), one short transaction per table. The generation
        counters stay (W4).
        """
        if limit <= 0:
            raise ValueError(f"a sweep limit must be a positive number of records, got {limit}")
        removed = 0
        for table in (executions, tombstones, heartbeats):
            budget = limit - removed
            if budget == 0:
                break
            expired = table.c.expires_at_ms <= now_ms
            victims = (
                sa.select(table.c.tenant_id, table.c.execution_id)
                .where(expired)
                .order_by(table.c.expires_at_ms)
                .limit(budget)
            )
            statement = sa.delete(table).where(
                sa.tuple_(table.c.tenant_id, table.c.execution_id).in_(victims), expired
            )
            async with transaction(self._writer) as connection:
                removed += (await connection.execute(statement)).rowcount
        return removed


def _check_positive(what: str, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{what} must be a positive number of milliseconds, got {value}")


def _below(
    select: sa.Select[tuple[object, ...]], after: PageCursor | None
) -> sa.Select[tuple[object, ...]]:
    """Rows strictly after the cursor's entry: later writes move to the front, never in."""
    if after is None:
        return select
    return select.where(
        sa.tuple_(executions.c.updated_at_ms, executions.c.execution_id)
        < sa.tuple_(sa.literal(after.score), sa.literal(after.execution_id))
    )
