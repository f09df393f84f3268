"""Execution checkpoints (S1-S3, W4, W13, S5): fenced incremental saves, deletes with
tombstones, heartbeats and listings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery
from plaita.domain.history import DEFAULT_HISTORY_PAGE, HistoryEntry, HistoryPage
from plaita.domain.tombstone import Tombstone

#: Index entries one ``page`` call looks at before it returns what it found (bounded work).
PAGE_SCAN_BUDGET = 2_000


@attrs.frozen
class NodeHeartbeat:
    """The running node's progress as the lease holder last recorded it (W15, W19)."""

    node_id: str
    #: Wall-clock time of the record, in milliseconds since the epoch.
    last_update_ms: int


@attrs.frozen
class ExecutionPage:
    """One page of an execution listing (C1) and where the next one begins."""

    items: tuple[ExecutionState, ...]
    #: Pass back as ``cursor`` for the next page; None when there is nothing after this one.
    next_cursor: str | None = None


class ExecutionRepository(Protocol):
    """Where executions are checkpointed: every write is fenced by the lease generation."""

    async def load(self, execution_id: str) -> ExecutionState | None:
        """The stored checkpoint, or None (one round trip on Redis)."""
        ...

    async def save(
        self,
        state: ExecutionState,
        *,
        fence: int,
        previous: ExecutionState | None = None,
        history: Sequence[HistoryEntry] = (),
    ) -> None:
        """Store ``state`` if ``fence`` is the execution's current lease generation.

        ``history`` is what led to ``state`` (``plaita.domain.history``): appended to the
        execution's history in the same atomic write, numbered on from the last entry, the
        oldest dropped past the store's cap; nothing of it is written when the save is
        refused. The history outlives full saves and shares the state's lifetime (S5).

        ``previous`` is the state this holder last saved or loaded: only what changed since
        is written (S3), so a step's write does not grow with the run. Without it the whole
        state is written and replaces whatever was stored. Raises ``ExecutionLeaseError``
        (nothing written) when the fence is not current or the execution was deleted (W4,
        W13).

        Retention (S5): a terminal ``state`` makes every record of the execution (state,
        node results, variables, counters, heartbeat, operator flags, parked carriers)
        expire within the store's retention, in the same atomic write where the store allows
        it; a live one over a terminal one keeps them until the end again. The generation
        counter never expires (W4).
        """
        ...

    async def accept(self, state: ExecutionState, *, history: Sequence[HistoryEntry] = ()) -> bool:
        """Store a new execution's first state (``pending``, ADR 0022) where it has none.

        True when written, with ``history`` as its first entries, atomically; False, nothing
        written, when the execution has a state already (a reused id: the start carrier
        decides what it means) or a live tombstone (W13). Never fenced: no lease exists yet,
        and a holder of one has written a state already. Does not touch the generation.
        """
        ...

    async def history(
        self, execution_id: str, *, after: int | None = None, limit: int = DEFAULT_HISTORY_PAGE
    ) -> HistoryPage:
        """A page of the execution's history, oldest first (one round trip on Redis).

        Entries after seq ``after`` (None: from the oldest kept), at most ``limit``
        (``InvalidOperatorRequestError`` when ``after`` or ``limit`` is not one); an empty
        page when it has none.
        """
        ...

    async def append_history(self, execution_id: str, entries: Sequence[HistoryEntry]) -> None:
        """Append ``entries`` without a fence, best effort, while the execution's state exists.

        For what has no checkpoint to ride on (a worker that lost its lease); never brings
        a deleted or expired execution back.
        """
        ...

    async def delete(
        self,
        execution_id: str,
        *,
        fence: int | None,
        tombstone: Tombstone,
        tombstone_ttl_ms: int,
    ) -> Tombstone:
        """Remove everything of the execution and leave a tombstone, atomically (W13).

        Everything is its state, history, index entry, lease, counters, heartbeat, operator
        flags and parked carriers; the generation counter stays. ``fence`` is the deleting holder's
        generation (``ExecutionLeaseError``, nothing removed, when it is not current); None
        is an operator delete that revokes whoever holds the lease: the generation moves on,
        so the holder's later writes fail. A second delete keeps the first tombstone (and its
        ``deleted_at``), only ever extending its TTL, and removes again whatever was written
        for the execution since; the stored tombstone is returned. A store whose counters or
        flags live in another store (SQL) removes those right after its own transaction.
        """
        ...

    async def heartbeat(self, execution_id: str, *, fence: int, node_id: str, now_ms: int) -> None:
        """Record that ``node_id`` is still running at ``now_ms`` (W15), under the fence.

        Written only if ``fence`` is the execution's current lease generation and the
        execution was not deleted; otherwise raises ``ExecutionLeaseError`` and writes
        nothing, like ``save``. The record expires on its own; ``delete`` removes it.
        """
        ...

    async def last_heartbeat(self, execution_id: str) -> NodeHeartbeat | None:
        """The last recorded heartbeat while it lasts, or None (W19)."""
        ...

    async def tombstone(self, execution_id: str) -> Tombstone | None:
        """The execution's tombstone while it lasts, or None when it was never deleted (W13)."""
        ...

    async def list(
        self, *, flow_id: str | None = None, status: ExecutionStatus | None = None, limit: int = 100
    ) -> Sequence[ExecutionState]:
        """Executions, newest first, filtered by flow and status."""
        ...

    async def reindex(self) -> int:
        """List every stored execution of the tenant again; how many the index had lost."""
        ...

    async def page(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        query: ExecutionQuery = EVERY_EXECUTION,
    ) -> ExecutionPage:
        """One page of the current tenant's executions, newest first (index score, then id).

        The executions shown are those ``query`` matches (``ExecutionQuery.matches``), also
        limited to ``flow_id`` and ``status`` when given (``query.narrowed``:
        ``InvalidExecutionQueryError`` when they contradict it).

        ``cursor`` is a previous page's ``next_cursor`` (opaque; ``InvalidOperatorRequestError``
        when it is not one). Filters are applied to candidates read from the index in batches,
        until ``limit`` matched or the index ends; a page may stop early (fewer items, even
        none) after ``PAGE_SCAN_BUDGET`` candidates, with a cursor to go on from. Executions
        written while paging move to the front and do not shift later pages. ``next_cursor``
        is None once the index is exhausted.
        """
        ...
