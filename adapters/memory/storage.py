"""In-memory twin of the Redis execution repository, fenced by a LeaseManager (S1, W4)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from plaita.application.ports import LeaseManager
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.lease import check_fence


class MemoryExecutionRepository:
    """ExecutionRepository in memory; states are kept as JSON text, as Redis keeps them."""

    def __init__(self, leases: LeaseManager) -> None:
        self._leases = leases
        self._documents: dict[str, str] = {}

    async def load(self, execution_id: str) -> ExecutionState | None:
        document = self._documents.get(execution_id)
        return None if document is None else ExecutionState.from_json(json.loads(document))

    async def save(self, state: ExecutionState, *, fence: int) -> None:
        current = await self._leases.current_generation(state.execution_id)
        check_fence(state.execution_id, fence, current)
        self._documents[state.execution_id] = json.dumps(state.to_json(), separators=(",", ":"))

    async def list(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 100,
    ) -> Sequence[ExecutionState]:
        states = [ExecutionState.from_json(json.loads(d)) for d in self._documents.values()]
        matching = [
            state
            for state in states
            if (flow_id is None or state.flow_id == flow_id)
            and (status is None or state.status is status)
        ]
        # Same order as ZREVRANGE on the Redis index: score, then member, both descending.
        matching.sort(key=lambda state: (state.updated_at_ms, state.execution_id), reverse=True)
        return matching[: max(limit, 0)]
