"""Checkpoints as rows: a CheckpointDelta written as the changed header columns, node rows
and variable rows, and states read back from them (S3).

A steady-state step is one UPDATE of the header columns it changed and one upsert of the
node entry it wrote; nothing it did not change is sent, so its cost does not grow with the
number of steps before it. A full delta replaces every part.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from plaita.adapters.sqlalchemy.fencing import key, live_tombstone, upsert
from plaita.adapters.sqlalchemy.schema import (
    HEADER_FIELDS,
    JSON_HEADER_FIELDS,
    execution_nodes,
    execution_vars,
    executions,
)
from plaita.domain.checkpoint import CheckpointDelta, encode_value, state_from_parts
from plaita.domain.errors import DatabaseSchemaError
from plaita.domain.execution import JSON, ExecutionState
from plaita.domain.retention import Lifetime

#: Ids per ``IN (…)`` list when node and variable rows of many executions are read.
_IDS_PER_QUERY = 500
_PRIMARY_KEY = frozenset({"tenant_id", "execution_id"})


def header_values(header: Mapping[str, JSON]) -> dict[str, Any]:
    """Column values of the given header fields (JSON text for the structured ones)."""
    unknown = sorted(set(header) - HEADER_FIELDS)
    if unknown:
        raise DatabaseSchemaError(
            f"checkpoint header fields {unknown} have no column in the executions table; "
            "add them to adapters/sqlalchemy/schema.py with an Alembic migration"
        )
    return {
        name: encode_value(value) if name in JSON_HEADER_FIELDS else value
        for name, value in header.items()
    }


def header_texts(row: sa.RowMapping) -> dict[str, str]:
    """The stored texts of every header field of an ``executions`` row (the inverse)."""
    return {
        name: row[name] if name in JSON_HEADER_FIELDS else encode_value(row[name])
        for name in HEADER_FIELDS
    }


def alive(now_ms: int) -> sa.ColumnElement[bool]:
    """An execution row whose retention has not run out (a lapsed one reads as absent)."""
    return sa.or_(executions.c.expires_at_ms.is_(None), executions.c.expires_at_ms > now_ms)


def _expiry(lifetime: Lifetime, *, now_ms: int, retention_ms: int) -> dict[str, int | None]:
    """The ``expires_at_ms`` a save writes (S5): the retention's end for a terminal state,
    NULL for one live again, nothing for a live step."""
    if lifetime is Lifetime.EXPIRE:
        return {"expires_at_ms": now_ms + retention_ms}
    if lifetime is Lifetime.PERSIST:
        return {"expires_at_ms": None}
    return {}


def is_incremental(delta: CheckpointDelta) -> bool:
    # A delta that would move the row to another key is written in full instead.
    return not delta.full and not _PRIMARY_KEY & set(delta.header)


async def write_step(
    connection: AsyncConnection,
    tenant_id: str,
    delta: CheckpointDelta,
    *,
    now_ms: int,
    retention_ms: int,
) -> bool:
    """Apply an incremental delta; False (nothing written) when no live state is stored."""
    execution_id = delta.execution_id
    stored = sa.and_(
        key(executions, tenant_id, execution_id),
        alive(now_ms),
        ~live_tombstone(tenant_id, execution_id, now_ms),
    )
    values = {
        **header_values(delta.header),
        **_expiry(delta.lifetime, now_ms=now_ms, retention_ms=retention_ms),
    }
    if values:
        updated = await connection.execute(sa.update(executions).where(stored).values(values))
        if updated.rowcount != 1:
            return False
    elif not await connection.scalar(sa.select(sa.exists().where(stored))):
        return False
    await _write_entries(connection, execution_nodes, tenant_id, execution_id, delta.nodes)
    await _remove_entries(connection, execution_nodes, tenant_id, execution_id, delta.removed_nodes)
    await _write_entries(connection, execution_vars, tenant_id, execution_id, delta.variables)
    await _remove_entries(
        connection, execution_vars, tenant_id, execution_id, delta.removed_variables
    )
    return True


async def write_full(
    connection: AsyncConnection,
    tenant_id: str,
    delta: CheckpointDelta,
    *,
    now_ms: int,
    retention_ms: int,
) -> None:
    """Replace every part of the execution with the full delta's state.

    The header row is written first, then its node and variable rows: the order in which
    every writer (and the retention sweep's cascade) locks them.
    """
    execution_id = delta.execution_id
    row = {
        **header_values(delta.header),
        "tenant_id": tenant_id,
        "execution_id": execution_id,
        "expires_at_ms": None,
        **_expiry(delta.lifetime, now_ms=now_ms, retention_ms=retention_ms),
    }
    statement = upsert(connection, executions).values(row)
    statement = statement.on_conflict_do_update(
        index_elements=[executions.c.tenant_id, executions.c.execution_id],
        set_={name: statement.excluded[name] for name in row if name not in _PRIMARY_KEY},
    )
    await connection.execute(statement)
    for table in (execution_nodes, execution_vars):
        await connection.execute(sa.delete(table).where(key(table, tenant_id, execution_id)))
    await _write_entries(connection, execution_nodes, tenant_id, execution_id, delta.nodes)
    await _write_entries(connection, execution_vars, tenant_id, execution_id, delta.variables)


async def _write_entries(
    connection: AsyncConnection,
    table: sa.Table,
    tenant_id: str,
    execution_id: str,
    entries: Mapping[str, JSON],
) -> None:
    if not entries:
        return
    name, value = _entry_columns(table)
    statement = upsert(connection, table)
    statement = statement.on_conflict_do_update(
        index_elements=[table.c.tenant_id, table.c.execution_id, table.c[name]],
        set_={value: statement.excluded[value]},
    )
    rows = [
        {"tenant_id": tenant_id, "execution_id": execution_id, name: entry, value: encode_value(v)}
        for entry, v in entries.items()
    ]
    await connection.execute(statement, rows)


async def _remove_entries(
    connection: AsyncConnection,
    table: sa.Table,
    tenant_id: str,
    execution_id: str,
    removed: Sequence[str],
) -> None:
    if not removed:
        return
    name, _ = _entry_columns(table)
    await connection.execute(
        sa.delete(table).where(key(table, tenant_id, execution_id), table.c[name].in_(removed))
    )


def _entry_columns(table: sa.Table) -> tuple[str, str]:
    return ("node_id", "entry") if table is execution_nodes else ("name", "value")


# --- reads --------------------------------------------------------------------------------


async def read_states(
    connection: AsyncConnection, tenant_id: str, headers: Sequence[sa.Row[Any]]
) -> list[ExecutionState]:
    """Whole states for ``headers`` (``executions`` rows of one tenant), in their order."""
    ids = [row.execution_id for row in headers]
    nodes = await _read_entries(connection, execution_nodes, tenant_id, ids)
    variables = await _read_entries(connection, execution_vars, tenant_id, ids)
    return [
        state_from_parts(
            header_texts(row._mapping),
            nodes.get(row.execution_id, {}),
            variables.get(row.execution_id, {}),
        )
        for row in headers
    ]


async def _read_entries(
    connection: AsyncConnection, table: sa.Table, tenant_id: str, ids: Sequence[str]
) -> dict[str, dict[str, str]]:
    name, value = _entry_columns(table)
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for chunk in _chunks(ids):
        condition = (
            table.c.execution_id == chunk[0] if len(chunk) == 1 else table.c.execution_id.in_(chunk)
        )
        query = sa.select(table.c.execution_id, table.c[name], table.c[value]).where(
            table.c.tenant_id == tenant_id, condition
        )
        for execution_id, entry, text in await connection.execute(query):
            found[execution_id][entry] = text
    return found


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), _IDS_PER_QUERY):
        yield ids[start : start + _IDS_PER_QUERY]
