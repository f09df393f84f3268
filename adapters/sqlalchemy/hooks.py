"""Hooks created through the admin API on SQL (V10): one row per name."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.sqlalchemy.engine import transaction, writer
from plaita.adapters.sqlalchemy.fencing import upsert
from plaita.adapters.sqlalchemy.schema import hooks
from plaita.domain.hooks import HookDefinition, dump_hook, load_hook


class SqlHookStore:
    """HookStore on ``hooks``; an add is an insert that does nothing when the name exists."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._writer = writer(engine)

    async def add(self, hook: HookDefinition) -> bool:
        statement = (
            upsert(self._engine, hooks)
            .values(name=hook.name, tenant_id=hook.tenant_id, document=dump_hook(hook))
            .on_conflict_do_nothing()
        )
        async with transaction(self._writer) as connection:
            inserted = await connection.execute(statement)
        return bool(inserted.rowcount == 1)

    async def get(self, name: str) -> HookDefinition | None:
        query = sa.select(hooks.c.document).where(hooks.c.name == name)
        async with transaction(self._engine) as connection:
            document = await connection.scalar(query)
        return None if document is None else load_hook(document)

    async def list(self) -> Sequence[HookDefinition]:
        query = sa.select(hooks.c.document).order_by(hooks.c.name)
        async with transaction(self._engine) as connection:
            documents = (await connection.scalars(query)).all()
        return [load_hook(document) for document in documents]

    async def remove(self, name: str) -> bool:
        async with transaction(self._writer) as connection:
            deleted = await connection.execute(sa.delete(hooks).where(hooks.c.name == name))
        return bool(deleted.rowcount == 1)
