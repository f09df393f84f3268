"""Cron schedules on SQL: a row per schedule, a row per claimed due (W22)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from plaita.adapters.sqlalchemy.engine import transaction, writer
from plaita.adapters.sqlalchemy.fencing import upsert
from plaita.adapters.sqlalchemy.schema import schedule_claims, schedules
from plaita.application.ports import Clock, DueClaim, StoredSchedule
from plaita.domain.cron_schedules import (
    DueOutcome,
    Schedule,
    ScheduleRef,
    ScheduleState,
    record_due,
    resumed,
    schedule_exists,
)

_STATE_COLUMNS = tuple(field.name for field in attrs.fields(ScheduleState))


class SqlScheduleStore:
    """ScheduleStore on ``schedules`` and ``schedule_claims``.

    Every state change is one write transaction that first locks the schedule's row (``FOR
    UPDATE`` on PostgreSQL; SQLite's write transactions begin IMMEDIATE), then applies the
    domain's rule to what it read: two schedulers claiming or recording one due are
    serialised on that row. Claims expire by the injected clock; a deleted schedule takes its
    claims with it.
    """

    def __init__(self, engine: AsyncEngine, clock: Clock) -> None:
        self._engine = engine
        self._writer = writer(engine)
        self._clock = clock

    async def create(self, schedule: Schedule, *, paused: bool = False) -> None:
        state = ScheduleState.new(schedule, paused=paused)
        row = {
            "tenant_id": schedule.tenant_id,
            "schedule_id": schedule.schedule_id,
            "definition": json.dumps(schedule.to_json(), separators=(",", ":")),
            **attrs.asdict(state),
        }
        insert = upsert(self._engine, schedules).values(**row).on_conflict_do_nothing()
        try:
            async with transaction(self._writer) as connection:
                inserted = await connection.execute(insert)
        except IntegrityError:
            raise schedule_exists(schedule.ref) from None
        if inserted.rowcount == 0:
            raise schedule_exists(schedule.ref)

    async def get(self, ref: ScheduleRef) -> StoredSchedule | None:
        async with transaction(self._engine) as connection:
            row = (await connection.execute(sa.select(schedules).where(_key(ref)))).first()
        return None if row is None else _stored(row)

    async def list(self, tenant_id: str | None = None) -> Sequence[StoredSchedule]:
        query = sa.select(schedules).order_by(schedules.c.tenant_id, schedules.c.schedule_id)
        if tenant_id is not None:
            query = query.where(schedules.c.tenant_id == tenant_id)
        async with transaction(self._engine) as connection:
            rows = (await connection.execute(query)).all()
        return [_stored(row) for row in rows]

    async def set_paused(
        self, ref: ScheduleRef, paused: bool, *, now_ms: int
    ) -> StoredSchedule | None:
        async with transaction(self._writer) as connection:
            found = await _locked(connection, ref)
            if found is None:
                return None
            state = (
                attrs.evolve(found.state, paused=True) if paused else resumed(found.state, now_ms)
            )
            await _save_state(connection, ref, state)
        return attrs.evolve(found, state=state)

    async def delete(self, ref: ScheduleRef) -> bool:
        async with transaction(self._writer) as connection:
            await connection.execute(sa.delete(schedule_claims).where(_key(ref, schedule_claims)))
            deleted = await connection.execute(sa.delete(schedules).where(_key(ref)))
        return bool(deleted.rowcount)

    async def claim_due(
        self, ref: ScheduleRef, due_ms: int, *, holder: str, ttl_ms: int
    ) -> DueClaim:
        if ttl_ms <= 0:
            raise ValueError(f"a claim ttl must be a positive number of milliseconds, got {ttl_ms}")
        now_ms = self._clock.now_ms()
        async with transaction(self._writer) as connection:
            found = await _locked(connection, ref)
            if found is None:
                return DueClaim.GONE
            if not found.state.handles(due_ms):
                return DueClaim.DONE
            claim_key = sa.and_(_key(ref, schedule_claims), schedule_claims.c.due_ms == due_ms)
            claim = (
                await connection.execute(
                    sa.select(schedule_claims.c.holder_id, schedule_claims.c.expires_at_ms).where(
                        claim_key
                    )
                )
            ).first()
            if claim is not None and claim.holder_id != holder and claim.expires_at_ms > now_ms:
                return DueClaim.HELD
            values = {"holder_id": holder, "expires_at_ms": now_ms + ttl_ms}
            await connection.execute(
                upsert(connection, schedule_claims)
                .values(
                    tenant_id=ref.tenant_id, schedule_id=ref.schedule_id, due_ms=due_ms, **values
                )
                .on_conflict_do_update(
                    index_elements=["tenant_id", "schedule_id", "due_ms"], set_=values
                )
            )
        return DueClaim.CLAIMED

    async def record_due(
        self,
        ref: ScheduleRef,
        due_ms: int,
        outcome: DueOutcome,
        *,
        execution_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        async with transaction(self._writer) as connection:
            found = await _locked(connection, ref)
            if found is None:
                return False
            await connection.execute(
                sa.delete(schedule_claims).where(
                    _key(ref, schedule_claims), schedule_claims.c.due_ms == due_ms
                )
            )
            after = record_due(found.state, due_ms, outcome, execution_id=execution_id, error=error)
            if after is None:
                return False
            await _save_state(connection, ref, after)
        return True


def _key(ref: ScheduleRef, table: sa.Table = schedules) -> sa.ColumnElement[bool]:
    return sa.and_(table.c.tenant_id == ref.tenant_id, table.c.schedule_id == ref.schedule_id)


async def _locked(connection: AsyncConnection, ref: ScheduleRef) -> StoredSchedule | None:
    query = sa.select(schedules).where(_key(ref)).with_for_update()
    row = (await connection.execute(query)).first()
    return None if row is None else _stored(row)


async def _save_state(connection: AsyncConnection, ref: ScheduleRef, state: ScheduleState) -> None:
    await connection.execute(sa.update(schedules).where(_key(ref)).values(**attrs.asdict(state)))


def _stored(row: Any) -> StoredSchedule:
    mapping = row._mapping
    state = ScheduleState(**{name: mapping[name] for name in _STATE_COLUMNS})
    return StoredSchedule(
        Schedule.from_json(json.loads(mapping["definition"])),
        attrs.evolve(state, paused=bool(state.paused)),
    )
