"""In-memory twin of the Redis execution repository, fenced by the memory leases (S1, S3, S5,
W4, W13).

Each execution is kept in the parts Redis keeps, as JSON text per entry: the header fields,
the node results, the variables and the history (its newest entries and how many were ever
appended). A save applies only the delta a step produced, a
delete removes every part and leaves a tombstone that expires on the lease manager's clock.
A terminal checkpoint lets the parts, the heartbeat, the counters and the operator controls
expire within the retention on that clock (S5); a live one over it keeps them again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.tenancy import ScopedId, scoped
from plaita.application.ports import (
    PAGE_SCAN_BUDGET,
    ExecutionControls,
    ExecutionPage,
    NodeHeartbeat,
)
from plaita.application.tenancy import current_tenant
from plaita.domain.checkpoint import (
    CheckpointDelta,
    checkpoint_delta,
    encode_value,
    state_from_parts,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery
from plaita.domain.history import (
    DEFAULT_HISTORY_PAGE,
    HISTORY_CAP,
    HistoryEntry,
    HistoryPage,
    check_history_cap,
    history_window,
    page_of,
)
from plaita.domain.lease import check_fence, check_fenced_write
from plaita.domain.operator_controls import PageCursor, check_page_limit
from plaita.domain.retention import DEFAULT_RETENTION_MS, Lifetime, check_retention_ms
from plaita.domain.tenancy import check_same_tenant
from plaita.domain.tombstone import Tombstone


class ExpiringCounters(Protocol):
    """The part of the memory counter store a delete and a terminal checkpoint need."""

    async def forget(self, execution_id: str) -> None: ...

    async def expire_within(self, execution_id: str, ttl_ms: int) -> None: ...


class MemoryExecutionRepository:
    """ExecutionRepository in memory, with Redis's observable behaviour."""

    def __init__(
        self,
        leases: MemoryLeaseManager,
        counters: ExpiringCounters | None = None,
        *,
        controls: ExecutionControls | None = None,
        heartbeat_ttl_ms: int = 360_000,
        retention_ms: int = DEFAULT_RETENTION_MS,
        history_cap: int = HISTORY_CAP,
    ) -> None:
        if heartbeat_ttl_ms <= 0:
            raise ValueError(
                f"a heartbeat ttl must be a positive number of milliseconds, got {heartbeat_ttl_ms}"
            )
        self._leases = leases
        self._counters = counters
        self._controls = controls
        self._heartbeat_ttl_ms = heartbeat_ttl_ms
        self._retention_ms = check_retention_ms(retention_ms)
        self._history_cap = check_history_cap(history_cap)
        #: execution id -> its newest ``history_cap`` history entries (stored form), and how
        #: many were ever appended (the seq of the newest)
        self._history: dict[ScopedId, list[str]] = {}
        self._history_total: dict[ScopedId, int] = {}
        #: execution id -> when its state expires (ms on the lease manager's clock), if ever
        self._expire_at: dict[ScopedId, int] = {}
        #: execution id -> (heartbeat, expiry in ms on the lease manager's clock)
        self._heartbeats: dict[ScopedId, tuple[NodeHeartbeat, int]] = {}
        self._headers: dict[ScopedId, dict[str, str]] = {}
        self._nodes: dict[ScopedId, dict[str, str]] = {}
        self._variables: dict[ScopedId, dict[str, str]] = {}
        #: execution id -> (tombstone JSON, expiry in ms on the lease manager's clock)
        self._tombstones: dict[ScopedId, tuple[str, int]] = {}

    async def load(self, execution_id: str) -> ExecutionState | None:
        header = self._live_header(scoped(execution_id))
        if header is None:
            return None
        return state_from_parts(
            header,
            self._nodes.get(scoped(execution_id), {}),
            self._variables.get(scoped(execution_id), {}),
        )

    async def save(
        self,
        state: ExecutionState,
        *,
        fence: int,
        previous: ExecutionState | None = None,
        history: Sequence[HistoryEntry] = (),
    ) -> None:
        execution_id = state.execution_id
        check_same_tenant(state.tenant_id, current_tenant(), f"execution {execution_id!r}")
        current = await self._leases.current_generation(execution_id)
        check_fence(execution_id, fence, current)
        if self._live_tombstone(execution_id) is not None:
            # Deleted under this very generation: the fence is revoked (W13).
            check_fenced_write(execution_id, fence, current, None)
        delta = checkpoint_delta(previous, state)
        if not delta.full and self._live_header(scoped(execution_id)) is None:
            # Nothing stored to apply the step to: write the whole state, as Redis does.
            delta = checkpoint_delta(None, state)
        self._apply(delta)
        self._append(scoped(execution_id), history)
        await self._change_lifetime(execution_id, delta.lifetime)

    async def accept(self, state: ExecutionState, *, history: Sequence[HistoryEntry] = ()) -> bool:
        execution_id = state.execution_id
        check_same_tenant(state.tenant_id, current_tenant(), f"execution {execution_id!r}")
        if (
            self._live_header(scoped(execution_id)) is not None
            or self._live_tombstone(execution_id) is not None
        ):
            return False
        delta = checkpoint_delta(None, state)
        self._apply(delta)
        self._append(scoped(execution_id), history)
        await self._change_lifetime(execution_id, delta.lifetime)
        return True

    def _append(self, key: ScopedId, entries: Sequence[HistoryEntry]) -> None:
        """What the save script's RPUSH, LTRIM and INCRBY do."""
        if not entries:
            return
        kept = self._history.setdefault(key, [])
        kept.extend(entry.encode() for entry in entries)
        del kept[: max(0, len(kept) - self._history_cap)]
        self._history_total[key] = self._history_total.get(key, 0) + len(entries)

    async def history(
        self, execution_id: str, *, after: int | None = None, limit: int = DEFAULT_HISTORY_PAGE
    ) -> HistoryPage:
        key = scoped(execution_id)
        self._live_header(key)  # drops a history past its retention with its state
        kept = self._history.get(key, [])
        window = history_window(
            total=self._history_total.get(key, 0), held=len(kept), after=after, limit=limit
        )
        return page_of(kept[window.start : window.stop], window)

    async def append_history(self, execution_id: str, entries: Sequence[HistoryEntry]) -> None:
        key = scoped(execution_id)
        if self._live_header(key) is not None:
            self._append(key, entries)

    async def _change_lifetime(self, execution_id: str, lifetime: Lifetime) -> None:
        """What the Redis save script does to the TTLs (S5), on this store's clock."""
        key = scoped(execution_id)
        if lifetime is Lifetime.EXPIRE:
            due = self._leases.monotonic_ms() + self._retention_ms
            self._expire_at[key] = due
            heartbeat = self._heartbeats.get(key)
            if heartbeat is not None:
                self._heartbeats[key] = (heartbeat[0], min(heartbeat[1], due))
            if self._counters is not None:
                await self._counters.expire_within(execution_id, self._retention_ms)
        elif lifetime is Lifetime.PERSIST:
            self._expire_at.pop(key, None)
        if self._controls is not None and lifetime is not Lifetime.KEEP:
            ttl = self._retention_ms if lifetime is Lifetime.EXPIRE else None
            await self._controls.retain(execution_id, ttl_ms=ttl)

    async def heartbeat(self, execution_id: str, *, fence: int, node_id: str, now_ms: int) -> None:
        current = await self._leases.current_generation(execution_id)
        check_fence(execution_id, fence, current)
        if self._live_tombstone(execution_id) is not None:
            check_fenced_write(execution_id, fence, current, None)
        expires_at_ms = self._leases.monotonic_ms() + self._heartbeat_ttl_ms
        self._heartbeats[scoped(execution_id)] = (NodeHeartbeat(node_id, now_ms), expires_at_ms)

    async def last_heartbeat(self, execution_id: str) -> NodeHeartbeat | None:
        stored = self._heartbeats.get(scoped(execution_id))
        if stored is None:
            return None
        if self._leases.monotonic_ms() >= stored[1]:
            del self._heartbeats[scoped(execution_id)]
            return None
        return stored[0]

    def _apply(self, delta: CheckpointDelta) -> None:
        execution_id = delta.execution_id
        if delta.full:
            for part in (self._headers, self._nodes, self._variables):
                part.pop(scoped(execution_id), None)
        header = self._headers.setdefault(scoped(execution_id), {})
        nodes = self._nodes.setdefault(scoped(execution_id), {})
        variables = self._variables.setdefault(scoped(execution_id), {})
        header.update({name: encode_value(value) for name, value in delta.header.items()})
        nodes.update({node: encode_value(value) for node, value in delta.nodes.items()})
        for node in delta.removed_nodes:
            nodes.pop(node, None)
        variables.update({name: encode_value(value) for name, value in delta.variables.items()})
        for name in delta.removed_variables:
            variables.pop(name, None)

    async def delete(
        self,
        execution_id: str,
        *,
        fence: int | None,
        tombstone: Tombstone,
        tombstone_ttl_ms: int,
    ) -> Tombstone:
        _check_ttl(tombstone_ttl_ms)
        if fence is not None:
            check_fence(execution_id, fence, await self._leases.current_generation(execution_id))
        # Everything below runs without yielding to the event loop: one atomic step, like the
        # Lua script; only the counters, another store, are forgotten after it.
        self._leases.revoke(execution_id, advance_generation=fence is None)
        self._drop(scoped(execution_id))
        stored = self._store_tombstone(execution_id, tombstone, tombstone_ttl_ms)
        if self._controls is not None:
            await self._controls.clear(execution_id)  # runs to its end without yielding
        if self._counters is not None:
            await self._counters.forget(execution_id)
        return stored

    def _drop(self, key: ScopedId) -> None:
        parts = (self._headers, self._nodes, self._variables, self._heartbeats, self._history)
        for part in parts:
            part.pop(key, None)
        self._history_total.pop(key, None)
        self._expire_at.pop(key, None)

    def _live_header(self, key: ScopedId) -> dict[str, str] | None:
        """The stored header, or None; a state past its retention is dropped here, as a
        Redis key past its TTL is gone for every read."""
        expire_at = self._expire_at.get(key)
        if expire_at is not None and self._leases.monotonic_ms() >= expire_at:
            self._drop(key)
        return self._headers.get(key)

    def _live_headers(self, tenant_id: str) -> list[tuple[ScopedId, dict[str, str]]]:
        keys = [key for key in self._headers if key[0] == tenant_id]
        return [(key, header) for key in keys if (header := self._live_header(key)) is not None]

    async def prune_indexes(self, *, budget: int) -> int:
        """IndexJanitor: drop at most ``budget`` states past their retention; how many."""
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"a prune budget is a whole number >= 1, got {budget!r}")
        now_ms = self._leases.monotonic_ms()
        expired = [key for key, due in self._expire_at.items() if now_ms >= due][:budget]
        for key in expired:
            self._drop(key)
        return len(expired)

    def _store_tombstone(self, execution_id: str, tombstone: Tombstone, ttl_ms: int) -> Tombstone:
        now_ms = self._leases.monotonic_ms()
        existing = self._live_tombstone(execution_id)
        if existing is None:
            document = json.dumps(tombstone.to_json(), separators=(",", ":"))
            self._tombstones[scoped(execution_id)] = (document, now_ms + ttl_ms)
            return tombstone
        document, expires_at_ms = existing
        # A second delete keeps the first record and only ever extends its TTL.
        self._tombstones[scoped(execution_id)] = (document, max(expires_at_ms, now_ms + ttl_ms))
        return Tombstone.from_json(json.loads(document))

    async def tombstone(self, execution_id: str) -> Tombstone | None:
        live = self._live_tombstone(execution_id)
        return None if live is None else Tombstone.from_json(json.loads(live[0]))

    def tombstone_ttl_ms(self, execution_id: str) -> int | None:
        """Milliseconds the tombstone has left, like PTTL; None when there is none."""
        live = self._live_tombstone(execution_id)
        return None if live is None else live[1] - self._leases.monotonic_ms()

    def _live_tombstone(self, execution_id: str) -> tuple[str, int] | None:
        stored = self._tombstones.get(scoped(execution_id))
        if stored is None:
            return None
        if self._leases.monotonic_ms() >= stored[1]:
            del self._tombstones[scoped(execution_id)]
            return None
        return stored

    async def list(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 100,
    ) -> Sequence[ExecutionState]:
        tenant_id = current_tenant()
        states = [
            state_from_parts(header, self._nodes[key], self._variables[key])
            for key, header in self._live_headers(tenant_id)
        ]
        matching = [
            state
            for state in states
            if (flow_id is None or state.flow_id == flow_id)
            and (status is None or state.status is status)
        ]
        # Same order as ZREVRANGE on the Redis index: score, then member, both descending.
        matching.sort(key=lambda state: (state.updated_at_ms, state.execution_id), reverse=True)
        return matching[: max(limit, 0)]

    async def reindex(self) -> int:
        """ExecutionRepository.reindex: the twin's listing reads the states themselves, so
        nothing is ever missing from it."""
        return 0

    async def page(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        query: ExecutionQuery = EVERY_EXECUTION,
    ) -> ExecutionPage:
        """ExecutionRepository.page, in the order of the Redis index (C1)."""
        check_page_limit(limit)
        where = query.narrowed(flow_id=flow_id, status=status)
        after = None if cursor is None else PageCursor.decode(cursor)
        tenant_id = current_tenant()
        # The index's entries: (score, id), newest first, as ZREVRANGEBYSCORE returns them.
        entries = sorted(
            (
                (int(json.loads(header["updated_at_ms"])), key[1])
                for key, header in self._live_headers(tenant_id)
            ),
            reverse=True,
        )
        candidates = [e for e in entries if after is None or after.precedes(*e)]
        items: list[ExecutionState] = []
        examined = 0
        for _score, execution_id in candidates:
            examined += 1
            state = await self.load(execution_id)
            if state is not None and where.matches(state):
                items.append(state)
            if len(items) == limit or examined == PAGE_SCAN_BUDGET:
                break
        more = examined < len(candidates)
        last = candidates[examined - 1] if examined else None
        next_cursor = PageCursor(*last).encode() if more and last is not None else None
        return ExecutionPage(tuple(items), next_cursor)


def _check_ttl(ttl_ms: int) -> None:
    if ttl_ms <= 0:
        raise ValueError(f"a tombstone ttl must be a positive number of milliseconds, got {ttl_ms}")
