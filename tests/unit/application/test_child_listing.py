"""ListChildren on the memory twin (E13, E14): a parent's children in node and item order,
a page at a time, found from their derived ids."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.application.use_cases.child_listing import ListChildren
from plaita.domain.children import MapProgress, OnItemError, child_execution_id
from plaita.domain.errors import InvalidChildCursorError, UnknownExecutionError
from plaita.domain.execution import ExecutionState, ExecutionStatus, ParentLink, Suspension
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from .twin import Twin

PER_ITEM = {
    "flow_id": "per_item",
    "start": "out",
    "nodes": [{"id": "out", "type": "end"}],
}
PARENT = {
    "flow_id": "parent",
    "start": "check",
    "nodes": [
        {"id": "check", "type": "subflow", "flow_id": "per_item", "next": "each"},
        {
            "id": "each",
            "type": "map",
            "items": "$input.items",
            "flow_id": "per_item",
            "next": "done",
        },
        {"id": "done", "type": "end"},
    ],
}
PLAIN = {
    "flow_id": "plain",
    "start": "done",
    "nodes": [{"id": "done", "type": "end"}],
}


@pytest.fixture
async def listing(twin: Twin) -> ListChildren:
    for document in (PER_ITEM, PARENT, PLAIN):
        await twin.catalog.register(Flow.from_document(document), owner=SHARED)
    return children_of(twin, twin.executions)


def children_of(twin: Twin, executions: Any) -> ListChildren:
    return ListChildren(executions=executions, flows=twin.catalog, controls=twin.controls)


async def seed(
    twin: Twin,
    execution_id: str,
    flow_id: str,
    *,
    parent: ParentLink | None = None,
    suspension: Suspension | None = None,
    into: MemoryExecutionRepository | None = None,
) -> ExecutionState:
    state = ExecutionState.new(
        execution_id=execution_id,
        flow_id=flow_id,
        flow_version="1",
        fingerprint="f",
        start_node_id="out",
        input={},
        now_ms=twin.clock.now_ms(),
        status=ExecutionStatus.PENDING,
    )
    state = attrs.evolve(state, parent=parent, suspension=suspension)
    assert await (into or twin.executions).accept(state)
    return state


async def seed_map(
    twin: Twin, parent_id: str, count: int, *, into: MemoryExecutionRepository | None = None
) -> list[str]:
    ids = [child_execution_id(parent_id, "each", i) for i in range(count)]
    for index, child_id in enumerate(ids):
        link = ParentLink(parent_id, "parent", "each", index)
        await seed(twin, child_id, "per_item", parent=link, into=into)
    return ids


def ids_of(page: Any) -> list[str]:
    return [state.execution_id for state, _flags in page.items]


async def test_a_map_of_25_children_pages_by_10_in_item_order(
    twin: Twin, listing: ListChildren
) -> None:
    await seed(twin, "p-1", "parent")
    children = await seed_map(twin, "p-1", 25)

    first = await listing("p-1", limit=10)
    second = await listing("p-1", limit=10, cursor=first.next_cursor)
    third = await listing("p-1", limit=10, cursor=second.next_cursor)

    assert (first.next_cursor, second.next_cursor, third.next_cursor) == (
        "each:10",
        "each:20",
        None,
    )
    assert ids_of(first) + ids_of(second) + ids_of(third) == children
    assert ids_of(third) == [f"p-1.each.{i}" for i in range(20, 25)]


async def test_a_subflow_lists_its_one_child_before_the_map_after_it(
    twin: Twin, listing: ListChildren
) -> None:
    await seed(twin, "p-2", "parent")
    await seed(twin, "p-2.check", "per_item", parent=ParentLink("p-2", "parent", "check"))
    await seed_map(twin, "p-2", 3)

    first = await listing("p-2", limit=2)
    rest = await listing("p-2", limit=2, cursor=first.next_cursor)

    assert ids_of(first) == ["p-2.check", "p-2.each.0"]
    assert first.next_cursor == "each:1"
    assert ids_of(rest) == ["p-2.each.1", "p-2.each.2"] and rest.next_cursor is None
    state, flags = first.items[0]
    assert state.parent == ParentLink("p-2", "parent", "check", None)
    assert not flags.paused


async def test_a_subflow_child_alone_is_one_page(twin: Twin, listing: ListChildren) -> None:
    await seed(twin, "p-3", "parent")
    await seed(twin, "p-3.check", "per_item", parent=ParentLink("p-3", "parent", "check"))

    page = await listing("p-3")

    assert ids_of(page) == ["p-3.check"] and page.next_cursor is None


async def test_a_paused_child_shows_its_flag(twin: Twin, listing: ListChildren) -> None:
    await seed(twin, "p-4", "parent")
    await seed_map(twin, "p-4", 2)
    await twin.controls.set_flags("p-4.each.1", paused=True)

    page = await listing("p-4")

    assert [flags.paused for _state, flags in page.items] == [False, True]


@pytest.mark.parametrize(
    "flow_id",
    [
        pytest.param("plain", id="a flow without child nodes"),
        pytest.param("parent", id="child nodes not reached yet"),
    ],
)
async def test_a_parent_without_children_has_an_empty_page(
    twin: Twin, listing: ListChildren, flow_id: str
) -> None:
    await seed(twin, "p-5", flow_id)

    page = await listing("p-5")

    assert page.items == () and page.next_cursor is None


async def test_an_execution_with_a_childs_id_but_no_parent_link_is_not_listed(
    twin: Twin, listing: ListChildren
) -> None:
    await seed(twin, "p-7", "parent")
    await seed(twin, "p-7.check", "per_item")  # started by hand under that id

    page = await listing("p-7")

    assert page.items == ()


class CountingExecutions(MemoryExecutionRepository):
    """The memory repository, counting its loads."""

    loads = 0

    async def load(self, execution_id: str) -> ExecutionState | None:
        self.loads += 1
        return await super().load(execution_id)


async def test_a_parent_waiting_on_its_map_bounds_the_loads_by_its_progress(
    twin: Twin, listing: ListChildren
) -> None:
    executions = CountingExecutions(twin.leases)
    progress = MapProgress(40, 10, OnItemError.FAIL, started=10)
    waiting = Suspension("each", map=progress)
    await seed(twin, "p-8", "parent", suspension=waiting, into=executions)
    await seed_map(twin, "p-8", 10, into=executions)

    page = await children_of(twin, executions)("p-8", limit=50)

    assert len(page.items) == 10 and page.next_cursor is None
    # the parent, the subflow's one child, and the ten started items: never item 10
    assert executions.loads == 1 + 1 + 10


async def test_an_unknown_parent_is_unknown_execution_error(listing: ListChildren) -> None:
    with pytest.raises(UnknownExecutionError, match="'nobody' does not exist"):
        await listing("nobody")


@pytest.mark.parametrize(
    "cursor",
    ["each", "each:", ":3", "each:-1", "each:x", "each:\u0661", "nowhere:0", "done:0", "check:1"],
)
async def test_a_bad_cursor_is_refused_saying_what_to_pass(
    twin: Twin, listing: ListChildren, cursor: str
) -> None:
    await seed(twin, "p-9", "parent")

    with pytest.raises(InvalidChildCursorError, match="pass a previous page's next_cursor"):
        await listing("p-9", cursor=cursor)


async def test_a_short_map_on_a_long_page_reads_few_missing_ids(
    twin: Twin, listing: ListChildren
) -> None:
    executions = CountingExecutions(twin.leases)
    await seed(twin, "p-10", "parent", into=executions)
    await seed_map(twin, "p-10", 3, into=executions)

    page = await children_of(twin, executions)("p-10", limit=500)

    assert len(page.items) == 3
    assert executions.loads < 30  # the first probe's ids, not the 501 a page could hold


async def test_a_map_longer_than_one_probe_is_listed_whole(
    twin: Twin, listing: ListChildren
) -> None:
    await seed(twin, "p-11", "parent")
    children = await seed_map(twin, "p-11", 45)

    page = await listing("p-11", limit=100)

    assert ids_of(page) == children and page.next_cursor is None
