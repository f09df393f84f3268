"""Where a listing of a parent's children stands (E13, E14): the child nodes in order, the
cursor between two pages, and how far a map's children can reach.

A parent's children are found, not indexed: their ids derive from the parent's
(``child_execution_id``), node by node in the flow document's order — one for a
``subflow``, item 0, 1, 2, … for a ``map``, whose children start in item order so the first
missing index ends the node's list. A cursor names the next child to list as
``<node_id>:<index>`` (``:0`` for a subflow's one child).
"""

from __future__ import annotations

import attrs

from plaita.domain.children import MAX_MAP_ITEMS, child_execution_id
from plaita.domain.errors import InvalidChildCursorError
from plaita.domain.execution import ExecutionState
from plaita.domain.flow import ChildNode, Flow, MapNode, SubflowNode


@attrs.frozen
class ChildPosition:
    """One child's place in the listing: its node, and its item (0 for a subflow)."""

    node_id: str
    index: int = 0

    def cursor(self) -> str:
        return f"{self.node_id}:{self.index}"


def child_nodes(flow: Flow) -> list[ChildNode]:
    """The ``subflow`` and ``map`` nodes of ``flow``, in its document's order."""
    return [node for node in flow.document.nodes if isinstance(node, SubflowNode | MapNode)]


def parse_child_cursor(cursor: str, flow: Flow) -> ChildPosition:
    """The position ``cursor`` names in ``flow``; ``InvalidChildCursorError`` says why not."""
    node_id, sep, index_text = cursor.rpartition(":")
    hint = "pass a previous page's next_cursor, or no cursor for the first page"
    if not sep or not node_id or not index_text.isascii() or not index_text.isdigit():
        raise InvalidChildCursorError(
            f"a children cursor reads '<node_id>:<index>', got {cursor!r}; {hint}"
        )
    nodes = {node.id: node for node in child_nodes(flow)}
    node = nodes.get(node_id)
    if node is None:
        raise InvalidChildCursorError(
            f"cursor {cursor!r} names node {node_id!r}, which is no subflow or map node of "
            f"flow {flow.flow_id!r} version {flow.version!r}; {hint}"
        )
    index = int(index_text)
    if index >= (1 if isinstance(node, SubflowNode) else MAX_MAP_ITEMS):
        raise InvalidChildCursorError(
            f"cursor {cursor!r}: node {node_id!r} has no child {index}; {hint}"
        )
    return ChildPosition(node_id, index)


def children_bound(parent: ExecutionState, node: ChildNode) -> int:
    """How many children ``node`` of ``parent`` may have started, at most: one for a
    subflow; for a map, as many as its progress says while the parent waits on it, else
    the most a map runs over (its list ends at the first missing child)."""
    if isinstance(node, SubflowNode):
        return 1
    suspension = parent.suspension
    if suspension is not None and suspension.node_id == node.id and suspension.map is not None:
        return suspension.map.started
    return MAX_MAP_ITEMS


def nodes_from(flow: Flow, start: ChildPosition | None) -> list[tuple[ChildNode, int]]:
    """The child nodes a listing from ``start`` goes through, each with its first index."""
    nodes = child_nodes(flow)
    if start is None:
        return [(node, 0) for node in nodes]
    at = next(i for i, node in enumerate(nodes) if node.id == start.node_id)
    return [(nodes[at], start.index)] + [(node, 0) for node in nodes[at + 1 :]]


def child_id_at(parent_id: str, node: ChildNode, index: int) -> str:
    """The id of the child at ``index`` of ``node`` (a subflow's one child is index 0)."""
    return child_execution_id(parent_id, node.id, index if isinstance(node, MapNode) else None)


def is_child_of(state: ExecutionState, parent_id: str, node: ChildNode) -> bool:
    """Whether ``state`` was started by ``node`` of ``parent_id`` (not an execution that
    merely was given the id a child would have)."""
    link = state.parent
    return link is not None and link.execution_id == parent_id and link.node_id == node.id
