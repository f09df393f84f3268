"""The execution store every process uses: the configured one, announcing the saves that end
an execution (and deletes) on ``EndNotices``, so ``result()`` waiters wake at once.

Every terminal write goes through ``ExecutionRepository.save`` (a worker's checkpoint, the
dead-letter guard's and the reaper's borrowed writes, a cancel), so announcing here misses
none and adds one command to the last write of an execution only. The notice is best effort
by contract: one that fails is logged and the save stands — a waiter re-reads the state at a
bounded interval anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from plaita.application.ports import EndNotices, ExecutionPage, ExecutionRepository, NodeHeartbeat
from plaita.application.use_cases.children import ChildLinks
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery
from plaita.domain.history import DEFAULT_HISTORY_PAGE, HistoryEntry, HistoryPage
from plaita.domain.results import ends_execution
from plaita.domain.tombstone import Tombstone

log = logging.getLogger("plaita.end_notices")


class AnnouncingExecutions:
    """An ``ExecutionRepository`` that is ``store``, plus the end notices; and, given
    ``links``, what an end or a delete does to the parent and the children (E13, E14)."""

    def __init__(
        self, store: ExecutionRepository, notices: EndNotices, links: ChildLinks | None = None
    ) -> None:
        self.store = store
        self._notices = notices
        self._links = links

    async def save(
        self,
        state: ExecutionState,
        *,
        fence: int,
        previous: ExecutionState | None = None,
        history: Sequence[HistoryEntry] = (),
    ) -> None:
        await self.store.save(state, fence=fence, previous=previous, history=history)
        if ends_execution(previous, state):
            await self._announce(state.execution_id)
            if self._links is not None:
                await self._links.ended(previous, state)

    async def delete(
        self,
        execution_id: str,
        *,
        fence: int | None,
        tombstone: Tombstone,
        tombstone_ttl_ms: int,
    ) -> Tombstone:
        # What it waited for is read first: a parent deleted while its children run cancels
        # them (E13, E14).
        doomed = None if self._links is None else await self.store.load(execution_id)
        stored = await self.store.delete(
            execution_id, fence=fence, tombstone=tombstone, tombstone_ttl_ms=tombstone_ttl_ms
        )
        await self._announce(execution_id)  # a waiter learns it is gone
        if self._links is not None and doomed is not None and not doomed.is_terminal:
            await self._links.cascade(doomed, doomed.suspension)
        return stored

    async def _announce(self, execution_id: str) -> None:
        try:
            await self._notices.announce(execution_id)
        except Exception as exc:
            log.warning(
                "event=end_notice.failed execution_id=%s error=%r: the write stands; whoever "
                "awaits its result finds it at the next re-read of the state",
                execution_id,
                exc,
            )

    # --- the rest is the store's ----------------------------------------------------------

    async def load(self, execution_id: str) -> ExecutionState | None:
        return await self.store.load(execution_id)

    async def history(
        self, execution_id: str, *, after: int | None = None, limit: int = DEFAULT_HISTORY_PAGE
    ) -> HistoryPage:
        return await self.store.history(execution_id, after=after, limit=limit)

    async def accept(self, state: ExecutionState, *, history: Sequence[HistoryEntry] = ()) -> bool:
        return await self.store.accept(state, history=history)

    async def append_history(self, execution_id: str, entries: Sequence[HistoryEntry]) -> None:
        await self.store.append_history(execution_id, entries)

    async def heartbeat(self, execution_id: str, *, fence: int, node_id: str, now_ms: int) -> None:
        await self.store.heartbeat(execution_id, fence=fence, node_id=node_id, now_ms=now_ms)

    async def last_heartbeat(self, execution_id: str) -> NodeHeartbeat | None:
        return await self.store.last_heartbeat(execution_id)

    async def tombstone(self, execution_id: str) -> Tombstone | None:
        return await self.store.tombstone(execution_id)

    async def list(
        self, *, flow_id: str | None = None, status: ExecutionStatus | None = None, limit: int = 100
    ) -> Sequence[ExecutionState]:
        return await self.store.list(flow_id=flow_id, status=status, limit=limit)

    async def reindex(self) -> int:
        return await self.store.reindex()

    async def page(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        query: ExecutionQuery = EVERY_EXECUTION,
    ) -> ExecutionPage:
        return await self.store.page(
            flow_id=flow_id, status=status, limit=limit, cursor=cursor, query=query
        )
