"""The execution history as rows (``schema.execution_history``): appended in the transaction
of the write it belongs to, trimmed to the cap there, read a page at a time.

The rows of one execution are numbered by ``seq`` (1, 2, …; never reused): an append reads
the highest one under the lock its transaction holds (the lease row), so appends never race.
The lowest ``seq`` kept is one more than what the cap dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from plaita.adapters.sqlalchemy.fencing import key
from plaita.adapters.sqlalchemy.schema import execution_history
from plaita.domain.history import HistoryEntry, HistoryPage, history_window, page_of


async def append(
    connection: AsyncConnection,
    tenant_id: str,
    execution_id: str,
    entries: Sequence[HistoryEntry],
    *,
    cap: int,
) -> None:
    """Append ``entries`` after the newest stored, then drop what falls past ``cap``."""
    if not entries:
        return
    mine = key(execution_history, tenant_id, execution_id)
    newest = await connection.scalar(sa.select(sa.func.max(execution_history.c.seq)).where(mine))
    last = int(newest or 0)
    rows = [
        {"tenant_id": tenant_id, "execution_id": execution_id, "seq": last + i, "entry": e.encode()}
        for i, e in enumerate(entries, start=1)
    ]
    await connection.execute(sa.insert(execution_history), rows)
    total = last + len(entries)
    if total > cap:
        await connection.execute(
            sa.delete(execution_history).where(mine, execution_history.c.seq <= total - cap)
        )


async def read(
    connection: AsyncConnection,
    tenant_id: str,
    execution_id: str,
    *,
    after: int | None,
    limit: int,
) -> HistoryPage:
    """A page of the stored history (the caller checked the execution is alive)."""
    mine = key(execution_history, tenant_id, execution_id)
    bounds = sa.select(
        sa.func.min(execution_history.c.seq), sa.func.max(execution_history.c.seq)
    ).where(mine)
    oldest, newest = (await connection.execute(bounds)).one()
    total = int(newest or 0)
    held = 0 if oldest is None else total - int(oldest) + 1
    window = history_window(total=total, held=held, after=after, limit=limit)
    if window.stop == window.start:
        return page_of([], window)
    first = window.first_seq + window.start
    query = (
        sa.select(execution_history.c.entry)
        .where(mine, execution_history.c.seq >= first)
        .order_by(execution_history.c.seq)
        .limit(window.stop - window.start)
    )
    return page_of(list((await connection.scalars(query)).all()), window)
