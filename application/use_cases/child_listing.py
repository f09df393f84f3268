"""A page of a parent execution's children, with their operator flags (E13, E14, C1).

The children are not indexed: their ids derive from the parent's, node by node in the flow
document's order (``plaita.domain.child_listing``), so a page loads the ids it could hold,
at once, and stops a map's list at its first missing item — children start in item order.
"""

from __future__ import annotations

import asyncio

from plaita.application.ports import ExecutionControls, ExecutionRepository
from plaita.application.use_cases.executions import GetExecution
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.operator_controls.listing import ExecutionListing
from plaita.domain.child_listing import (
    ChildPosition,
    child_id_at,
    children_bound,
    is_child_of,
    nodes_from,
    parse_child_cursor,
)
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import ChildNode, Flow
from plaita.domain.operator_controls import ControlFlags, check_page_limit

Found = list[tuple[ChildPosition, ExecutionState]]

#: The items of a map whose end is unknown loaded at once first, then twice as many each
#: round: a page of 500 over a map of 3 children reads 20 ids, not 501.
FIRST_PROBE = 20


class ListChildren:
    """The children of one execution of the current tenant, a page at a time, in the order
    of their nodes in the flow and of their items; ``UnknownExecutionError`` for an unknown
    parent, ``InvalidChildCursorError`` for a cursor that is no page's ``next_cursor``."""

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        flows: FlowCatalog,
        controls: ExecutionControls,
    ) -> None:
        self._executions = executions
        self._get = GetExecution(executions)
        self._flows = flows
        self._controls = controls

    async def __call__(
        self, execution_id: str, *, cursor: str | None = None, limit: int = 50
    ) -> ExecutionListing:
        limit = check_page_limit(limit)
        parent = await self._get(execution_id)
        flow = await self._flows.get(parent.flow_id, parent.flow_version)
        start = None if cursor is None else parse_child_cursor(cursor, flow)
        # One child more than the page: its position is the next cursor, and a last page
        # says so instead of sending the caller to an empty one.
        found = await self._find(parent, flow, start, wanted=limit + 1)
        return await self._page(found, limit)

    async def _find(
        self, parent: ExecutionState, flow: Flow, start: ChildPosition | None, *, wanted: int
    ) -> Found:
        found: Found = []
        for node, first in nodes_from(flow, start):
            if len(found) >= wanted:
                break
            found += await self._children_of(parent, node, first, wanted - len(found))
        return found

    async def _children_of(
        self, parent: ExecutionState, node: ChildNode, first: int, wanted: int
    ) -> Found:
        """Up to ``wanted`` children of ``node`` from item ``first``, until the first missing."""
        bound = children_bound(parent, node)
        found: Found = []
        index = first
        size = FIRST_PROBE
        while len(found) < wanted and index < bound:
            batch = range(index, min(bound, index + wanted - len(found), index + size))
            size *= 2
            states = await asyncio.gather(
                *(self._executions.load(child_id_at(parent.execution_id, node, i)) for i in batch)
            )
            for i, state in zip(batch, states, strict=True):
                if state is None or not is_child_of(state, parent.execution_id, node):
                    return found
                found.append((ChildPosition(node.id, i), state))
            index = batch.stop
        return found

    async def _page(self, found: Found, limit: int) -> ExecutionListing:
        listed = [state for _, state in found[:limit]]
        flags = await self._controls.get_many([state.execution_id for state in listed])
        return ExecutionListing(
            tuple((state, flags.get(state.execution_id, ControlFlags())) for state in listed),
            found[limit][0].cursor() if len(found) > limit else None,
        )
