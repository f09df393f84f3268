"""Leases with fence generations on SQL, one statement per change (W3, W4, W24).

The ``leases`` row of an execution holds the holder, its expiry and the last generation
handed out. The row is never deleted — release only clears the holder — so the generation
is never reset, like Redis's ``…:fencegen``. Expiry is read against the injected clock's
wall time (``Clock.now_ms``), the one time every process sharing the database agrees on to
within clock synchronisation; the holder's watchdog renews at TTL/3 and fences itself 10 %
before the TTL ends, which absorbs that skew (``domain.lease``).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.sqlalchemy.engine import reader, transaction, writer
from plaita.adapters.sqlalchemy.fencing import current_generation, key, upsert
from plaita.adapters.sqlalchemy.schema import leases
from plaita.application.ports import Clock
from plaita.application.tenancy import current_tenant
from plaita.domain.lease import Lease


class SqlLeaseManager:
    """LeaseManager on the ``leases`` table."""

    def __init__(self, engine: AsyncEngine, clock: Clock) -> None:
        self._writer = writer(engine)
        self._reader = reader(engine)
        self._clock = clock

    async def acquire(self, execution_id: str, holder_id: str, *, ttl_ms: int) -> Lease | None:
        _check_ttl(ttl_ms)
        tenant_id = current_tenant()
        now_ms = self._clock.now_ms()
        statement = upsert_lease(self._writer, tenant_id, execution_id, holder_id, now_ms, ttl_ms)
        async with transaction(self._writer) as connection:
            generation = await connection.scalar(statement)
        if generation is None:
            return None
        return Lease(execution_id=execution_id, holder_id=holder_id, generation=int(generation))

    async def renew(self, lease: Lease, *, ttl_ms: int) -> bool:
        _check_ttl(ttl_ms)
        now_ms = self._clock.now_ms()
        statement = (
            sa.update(leases).where(self._held(lease, now_ms)).values(expires_at_ms=now_ms + ttl_ms)
        )
        async with transaction(self._writer) as connection:
            return (await connection.execute(statement)).rowcount == 1

    async def release(self, lease: Lease) -> bool:
        statement = (
            sa.update(leases)
            .where(self._held(lease, self._clock.now_ms()))
            .values(holder_id=None, expires_at_ms=None)
        )
        async with transaction(self._writer) as connection:
            return (await connection.execute(statement)).rowcount == 1

    async def holder(self, execution_id: str) -> Lease | None:
        query = sa.select(leases.c.holder_id, leases.c.generation).where(
            key(leases, current_tenant(), execution_id),
            leases.c.holder_id.is_not(None),
            leases.c.expires_at_ms > self._clock.now_ms(),
        )
        async with transaction(self._reader) as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            return None
        return Lease(execution_id=execution_id, holder_id=row.holder_id, generation=row.generation)

    async def current_generation(self, execution_id: str) -> int | None:
        tenant_id = current_tenant()
        async with transaction(self._reader) as connection:
            return await current_generation(connection, tenant_id, execution_id)

    def _held(self, lease: Lease, now_ms: int) -> sa.ColumnElement[bool]:
        """Still exactly this lease (holder and generation) and not expired."""
        return sa.and_(
            key(leases, current_tenant(), lease.execution_id),
            leases.c.holder_id == lease.holder_id,
            leases.c.generation == lease.generation,
            leases.c.expires_at_ms > now_ms,
        )


def upsert_lease(
    engine: AsyncEngine,
    tenant_id: str,
    execution_id: str,
    holder_id: str,
    now_ms: int,
    ttl_ms: int,
) -> sa.Executable:
    """Take the lease with the next generation unless a live holder has it; returns the
    generation, or no row while the lease is held. One statement: the row is created on the
    first acquire, and the conflict branch locks it, so two acquires never both win."""
    statement = upsert(engine, leases).values(
        tenant_id=tenant_id,
        execution_id=execution_id,
        generation=1,
        holder_id=holder_id,
        expires_at_ms=now_ms + ttl_ms,
    )
    return statement.on_conflict_do_update(
        index_elements=[leases.c.tenant_id, leases.c.execution_id],
        set_={
            "generation": sa.func.coalesce(leases.c.generation, 0) + 1,
            "holder_id": statement.excluded.holder_id,
            "expires_at_ms": statement.excluded.expires_at_ms,
        },
        where=sa.or_(leases.c.holder_id.is_(None), leases.c.expires_at_ms <= now_ms),
    ).returning(leases.c.generation)


def _check_ttl(ttl_ms: int) -> None:
    if ttl_ms <= 0:
        raise ValueError(f"a lease ttl must be a positive number of milliseconds, got {ttl_ms}")
