"""Fencing on SQL: every fenced write is a conditional UPDATE of the lease row (W4, W13).

A save, heartbeat or fenced delete starts its transaction with
``UPDATE leases … WHERE tenant_id = … AND execution_id = … AND generation = :fence``. One
row updated means the fence is current *and* the row is now locked until the transaction
ends, so no acquire can hand out the next generation while the write is in flight: the
check and the write are one atomic step, like the Lua script on Redis. Zero rows means the
fence is stale (or was never handed out) and nothing is written.

On PostgreSQL (READ COMMITTED) an UPDATE that waits for a concurrent acquire re-checks its
WHERE on the row the acquire committed, so a write racing the acquire of generation g+1
with fence g is refused; and an acquire waits for a write already holding the row, so the
new holder loads that write. On SQLite the write transaction began IMMEDIATE
(``engine.writer``), so writers are serialised by the database lock.

Deletes and writes lock the lease row first and the execution's rows after it, in that
order, so two of them never wait on each other in a cycle.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from plaita.adapters.sqlalchemy.schema import leases, tombstones
from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.lease import check_fence, check_fenced_write


def key(table: sa.Table, tenant_id: str, execution_id: str) -> sa.ColumnElement[bool]:
    """The primary key condition of one execution's row(s) in ``table``."""
    return sa.and_(table.c.tenant_id == tenant_id, table.c.execution_id == execution_id)


def upsert(
    bind: AsyncConnection | AsyncEngine, table: sa.Table
) -> postgresql.Insert | sqlite.Insert:
    """An INSERT that supports ``on_conflict_do_update`` / ``…_nothing`` on this database."""
    if bind.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


async def ensure_lease_row(connection: AsyncConnection, tenant_id: str, execution_id: str) -> None:
    """Create the lease row if it is missing, with no generation (none is invented)."""
    statement = upsert(connection, leases).values(tenant_id=tenant_id, execution_id=execution_id)
    await connection.execute(statement.on_conflict_do_nothing())


async def current_generation(
    connection: AsyncConnection, tenant_id: str, execution_id: str
) -> int | None:
    query = sa.select(leases.c.generation).where(key(leases, tenant_id, execution_id))
    generation: int | None = (await connection.execute(query)).scalar_one_or_none()
    return generation


async def claim_fence(
    connection: AsyncConnection,
    tenant_id: str,
    execution_id: str,
    fence: int,
    *,
    release_holder: bool = False,
) -> None:
    """Lock the lease row if ``fence`` is the current generation; ExecutionLeaseError (and
    nothing locked) otherwise. ``release_holder`` also drops the holder (a fenced delete)."""
    changes: dict[str, Any] = {"generation": leases.c.generation}
    if release_holder:
        changes = {"holder_id": None, "expires_at_ms": None}
    statement = (
        sa.update(leases)
        .where(key(leases, tenant_id, execution_id), leases.c.generation == fence)
        .values(changes)
    )
    if (await connection.execute(statement)).rowcount == 1:
        return
    current = await current_generation(connection, tenant_id, execution_id)
    check_fence(execution_id, fence, current)
    # Generations only grow: equal now but not a moment ago means a fence no acquire had
    # handed out yet when the write began.
    raise ExecutionLeaseError(
        f"execution {execution_id}: write with fence {fence} rejected, the lease generation "
        "changed while it was being written; acquire the lease again"
    )


async def revoke(connection: AsyncConnection, tenant_id: str, execution_id: str) -> None:
    """Drop whoever holds the lease and move the generation on (an operator delete, W13):
    the revoked holder's fence is stale from now on. A NULL generation stays NULL."""
    statement = (
        sa.update(leases)
        .where(key(leases, tenant_id, execution_id))
        .values(generation=leases.c.generation + 1, holder_id=None, expires_at_ms=None)
    )
    await connection.execute(statement)


def live_tombstone(tenant_id: str, execution_id: str, now_ms: int) -> sa.Exists:
    return sa.exists().where(
        key(tombstones, tenant_id, execution_id), tombstones.c.expires_at_ms > now_ms
    )


async def refuse_if_deleted(
    connection: AsyncConnection, tenant_id: str, execution_id: str, fence: int, now_ms: int
) -> None:
    """ExecutionLeaseError (revoked) when the execution has a live tombstone (W13).

    Run after ``claim_fence``: the lease row lock orders this read after any delete, which
    locks the same row before it writes the tombstone.
    """
    deleted = await connection.scalar(sa.select(live_tombstone(tenant_id, execution_id, now_ms)))
    if deleted:
        check_fenced_write(execution_id, fence, fence, None)
