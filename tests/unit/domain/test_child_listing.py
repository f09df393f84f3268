"""Where a listing of a parent's children stands (E13, E14): its nodes in order, its cursor,
and how far a map's children reach."""

from __future__ import annotations

import attrs
import pytest

from plaita.domain.child_listing import (
    ChildPosition,
    child_id_at,
    child_nodes,
    children_bound,
    nodes_from,
    parse_child_cursor,
)
from plaita.domain.children import MAX_MAP_ITEMS, MapProgress, OnItemError
from plaita.domain.errors import InvalidChildCursorError
from plaita.domain.execution import ExecutionState, Suspension
from plaita.domain.flow import Flow, MapNode, SubflowNode

FLOW = Flow.from_document(
    {
        "flow_id": "parent",
        "start": "first",
        "nodes": [
            {"id": "first", "type": "map", "items": "$input.a", "flow_id": "c", "next": "kyc"},
            {"id": "kyc", "type": "subflow", "flow_id": "c", "next": "wait"},
            {"id": "wait", "type": "event", "event_type": "go", "next": "second"},
            {"id": "second", "type": "map", "items": "$input.b", "flow_id": "c", "next": "done"},
            {"id": "done", "type": "end"},
        ],
    }
)
PARENT = ExecutionState.new(
    execution_id="p-1",
    flow_id="parent",
    flow_version="1",
    fingerprint="f",
    start_node_id="first",
    input={},
    now_ms=0,
)


def node(node_id: str) -> SubflowNode | MapNode:
    found = FLOW.node(node_id)
    assert isinstance(found, SubflowNode | MapNode)
    return found


def waiting_on(node_id: str, started: int) -> ExecutionState:
    progress = MapProgress(50, 5, OnItemError.FAIL, started=started)
    return attrs.evolve(PARENT, suspension=Suspension(node_id, map=progress))


def test_the_child_nodes_are_the_subflows_and_maps_in_document_order() -> None:
    assert [n.id for n in child_nodes(FLOW)] == ["first", "kyc", "second"]


def test_a_listing_from_a_cursor_starts_at_its_node_and_item() -> None:
    plan = nodes_from(FLOW, ChildPosition("kyc", 0))
    assert [(n.id, first) for n, first in plan] == [("kyc", 0), ("second", 0)]
    whole = [(n.id, first) for n, first in nodes_from(FLOW, None)]
    assert whole == [("first", 0), ("kyc", 0), ("second", 0)]


def test_a_subflow_has_one_child_whose_id_has_no_index() -> None:
    assert children_bound(PARENT, node("kyc")) == 1
    assert child_id_at("p-1", node("kyc"), 0) == "p-1.kyc"
    assert child_id_at("p-1", node("first"), 3) == "p-1.first.3"


@pytest.mark.parametrize(
    ("parent", "bound"),
    [
        pytest.param(waiting_on("second", 7), 7, id="waiting on the map: what it started"),
        pytest.param(waiting_on("first", 7), MAX_MAP_ITEMS, id="waiting on another map"),
        pytest.param(PARENT, MAX_MAP_ITEMS, id="not waiting: up to the first missing"),
    ],
)
def test_a_maps_children_reach_as_far_as_its_progress_says(
    parent: ExecutionState, bound: int
) -> None:
    assert children_bound(parent, node("second")) == bound


@pytest.mark.parametrize(
    ("cursor", "position"),
    [("first:0", ChildPosition("first", 0)), ("second:42", ChildPosition("second", 42))],
)
def test_a_cursor_is_read_back_as_the_position_it_was_written_from(
    cursor: str, position: ChildPosition
) -> None:
    assert parse_child_cursor(cursor, FLOW) == position
    assert position.cursor() == cursor


@pytest.mark.parametrize(
    ("cursor", "says"),
    [
        ("first", "reads '<node_id>:<index>'"),
        ("first:+1", "reads '<node_id>:<index>'"),
        ("wait:0", "no subflow or map node of flow 'parent'"),
        ("kyc:1", "has no child 1"),
        (f"first:{MAX_MAP_ITEMS}", f"has no child {MAX_MAP_ITEMS}"),
    ],
)
def test_a_cursor_that_no_page_wrote_is_refused_by_name(cursor: str, says: str) -> None:
    with pytest.raises(InvalidChildCursorError) as refused:
        parse_child_cursor(cursor, FLOW)
    assert says in str(refused.value)
