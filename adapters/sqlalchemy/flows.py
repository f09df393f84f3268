"""Flow definitions on SQL: one row per (flow_id, version) and a latest pointer (S2)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.sqlalchemy.engine import transaction, writer
from plaita.adapters.sqlalchemy.fencing import upsert
from plaita.adapters.sqlalchemy.schema import flow_latest, flows
from plaita.domain.flow import Flow


class SqlFlowRepository:
    """FlowRepository on ``flows`` (document JSON as Redis keeps it) and ``flow_latest``.

    Definitions are shared by the deployment's tenants, as on Redis.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._writer = writer(engine)

    async def put(self, flow: Flow) -> None:
        document = json.dumps(flow.to_document(), separators=(",", ":"))
        definition = upsert(self._engine, flows).values(
            flow_id=flow.flow_id,
            version=flow.version,
            document=document,
            fingerprint=flow.fingerprint,
        )
        latest = upsert(self._engine, flow_latest).values(
            flow_id=flow.flow_id, version=flow.version
        )
        async with transaction(self._writer) as connection:
            await connection.execute(
                definition.on_conflict_do_update(
                    index_elements=[flows.c.flow_id, flows.c.version],
                    set_={
                        "document": definition.excluded.document,
                        "fingerprint": definition.excluded.fingerprint,
                    },
                )
            )
            await connection.execute(
                latest.on_conflict_do_update(
                    index_elements=[flow_latest.c.flow_id],
                    set_={"version": latest.excluded.version},
                )
            )

    async def get(self, flow_id: str, version: str | None = None) -> Flow | None:
        query = sa.select(flows.c.document).where(flows.c.flow_id == flow_id)
        if version is None:
            query = query.join(
                flow_latest,
                sa.and_(
                    flow_latest.c.flow_id == flows.c.flow_id,
                    flow_latest.c.version == flows.c.version,
                ),
            )
        else:
            query = query.where(flows.c.version == version)
        async with transaction(self._engine) as connection:
            document = await connection.scalar(query)
        return None if document is None else Flow.from_json(document)

    async def list_ids(self) -> Sequence[str]:
        query = sa.select(flow_latest.c.flow_id).order_by(flow_latest.c.flow_id)
        async with transaction(self._engine) as connection:
            return list((await connection.scalars(query)).all())
