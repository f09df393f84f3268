"""A page of the current tenant's executions with their operator flags (C1, W23)."""

from __future__ import annotations

from typing import Any

import attrs

from plaita.application.ports import ExecutionControls, ExecutionRepository
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import EVERY_EXECUTION, ExecutionQuery
from plaita.domain.operator_controls import ControlFlags, check_page_limit

JSON = Any


@attrs.frozen
class ExecutionListing:
    items: tuple[tuple[ExecutionState, ControlFlags], ...]
    next_cursor: str | None

    def to_json(self) -> dict[str, JSON]:
        return {
            "items": [execution_summary(state, flags) for state, flags in self.items],
            "next_cursor": self.next_cursor,
        }


def execution_summary(state: ExecutionState, flags: ControlFlags) -> dict[str, JSON]:
    """The console's ExecutionSummary (api-contract.md) of one execution."""
    return {
        "execution_id": state.execution_id,
        "flow_id": state.flow_id,
        "flow_version": state.flow_version,
        "tenant_id": state.tenant_id,
        "status": state.status.value,
        "paused": flags.paused,
        "cancel_requested": flags.cancel_requested,
        "parked": flags.parked,
        "next_node_id": state.next_node_id,
        "last_node_id": state.last_node_id,
        "created_at_ms": state.created_at_ms,
        "updated_at_ms": state.updated_at_ms,
        "error": None if state.error is None else state.error.to_json(),
        "parent_id": None if state.parent is None else state.parent.execution_id,
    }


class ListExecutions:
    """A page of the current tenant's executions with their operator flags (C1)."""

    def __init__(self, *, executions: ExecutionRepository, controls: ExecutionControls) -> None:
        self._executions = executions
        self._controls = controls

    async def __call__(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        query: ExecutionQuery = EVERY_EXECUTION,
    ) -> ExecutionListing:
        """``query`` searches further: creation window, input conditions (C1)."""
        page = await self._executions.page(
            flow_id=flow_id,
            status=status,
            limit=check_page_limit(limit),
            cursor=cursor,
            query=query,
        )
        flags = await self._controls.get_many([state.execution_id for state in page.items])
        items = tuple(
            (state, flags.get(state.execution_id, ControlFlags())) for state in page.items
        )
        return ExecutionListing(items, page.next_cursor)
