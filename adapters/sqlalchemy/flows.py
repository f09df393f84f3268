"""Flow definitions on SQL: one row per (owner, flow_id, version) and a latest pointer per
owner and flow (S2)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.sqlalchemy.engine import transaction, writer
from plaita.adapters.sqlalchemy.fencing import upsert
from plaita.adapters.sqlalchemy.schema import SHARED_OWNER, flow_latest, flows
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import FlowOwner


def _owner(owner: FlowOwner) -> str:
    return SHARED_OWNER if owner.tenant_id is None else owner.tenant_id


class SqlFlowRepository:
    """FlowRepository on ``flows`` (document JSON as Redis keeps it) and ``flow_latest``.

    A registration is one write transaction: an insert that does nothing when the primary key
    (owner, flow_id, version) exists, then — only if it inserted — the latest pointer, unless
    the flow has one. Two concurrent registrations of one version meet at the primary key:
    the second waits for the first and inserts nothing (PostgreSQL), or waits for the write
    lock (SQLite). The pointer moves by an UPDATE whose WHERE names the expected version (or
    an insert that does nothing when a pointer exists): PostgreSQL re-reads a row another
    transaction updated before it applies the WHERE, so of two moves from one version only
    one updates.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._writer = writer(engine)

    async def put_if_absent(self, flow: Flow, *, owner: FlowOwner) -> Flow | None:
        who = _owner(owner)
        definition = upsert(self._engine, flows).values(
            owner=who,
            flow_id=flow.flow_id,
            version=flow.version,
            document=json.dumps(flow.to_document(), separators=(",", ":")),
            fingerprint=flow.fingerprint,
        )
        latest = self._first_latest(who, flow.flow_id, flow.version)
        async with transaction(self._writer) as connection:
            inserted = await connection.execute(definition.on_conflict_do_nothing())
            if inserted.rowcount == 0:
                stored = await connection.execute(
                    sa.select(flows.c.document).where(
                        flows.c.owner == who,
                        flows.c.flow_id == flow.flow_id,
                        flows.c.version == flow.version,
                    )
                )
                return Flow.from_json(stored.scalar_one())
            await connection.execute(latest)
        return None

    async def latest_version(self, flow_id: str, *, owner: FlowOwner) -> str | None:
        query = sa.select(flow_latest.c.version).where(
            flow_latest.c.owner == _owner(owner), flow_latest.c.flow_id == flow_id
        )
        async with transaction(self._engine) as connection:
            version: str | None = await connection.scalar(query)
        return version

    async def move_latest(
        self, flow_id: str, version: str, *, owner: FlowOwner, expected: str | None
    ) -> bool:
        who = _owner(owner)
        stored = sa.select(flows.c.version).where(
            flows.c.owner == who, flows.c.flow_id == flow_id, flows.c.version == version
        )
        if expected is None:
            move: sa.Executable = self._first_latest(who, flow_id, version)
        else:
            move = (
                sa.update(flow_latest)
                .where(
                    flow_latest.c.owner == who,
                    flow_latest.c.flow_id == flow_id,
                    flow_latest.c.version == expected,
                )
                .values(version=version)
            )
        async with transaction(self._writer) as connection:
            if await connection.scalar(stored) is None:
                return False
            moved = await connection.execute(move)
        return bool(moved.rowcount == 1)

    def _first_latest(self, who: str, flow_id: str, version: str) -> sa.Executable:
        """The latest pointer, inserted only while the flow has none."""
        return (
            upsert(self._engine, flow_latest)
            .values(owner=who, flow_id=flow_id, version=version)
            .on_conflict_do_nothing()
        )

    async def get(
        self, flow_id: str, version: str | None = None, *, owner: FlowOwner
    ) -> Flow | None:
        who = _owner(owner)
        query = sa.select(flows.c.document).where(flows.c.owner == who, flows.c.flow_id == flow_id)
        if version is None:
            query = query.join(
                flow_latest,
                sa.and_(
                    flow_latest.c.owner == flows.c.owner,
                    flow_latest.c.flow_id == flows.c.flow_id,
                    flow_latest.c.version == flows.c.version,
                ),
            )
        else:
            query = query.where(flows.c.version == version)
        async with transaction(self._engine) as connection:
            document = await connection.scalar(query)
        return None if document is None else Flow.from_json(document)

    async def list_ids(self, *, owner: FlowOwner) -> Sequence[str]:
        query = (
            sa.select(flow_latest.c.flow_id)
            .where(flow_latest.c.owner == _owner(owner))
            .order_by(flow_latest.c.flow_id)
        )
        async with transaction(self._engine) as connection:
            return list((await connection.scalars(query)).all())

    async def versions(self, flow_id: str, *, owner: FlowOwner) -> Sequence[str]:
        query = (
            sa.select(flows.c.version)
            .where(flows.c.owner == _owner(owner), flows.c.flow_id == flow_id)
            .order_by(flows.c.version)
        )
        async with transaction(self._engine) as connection:
            return sorted((await connection.scalars(query)).all())
