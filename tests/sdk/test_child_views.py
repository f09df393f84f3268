"""A parent's children and a child's parent through plaita.Client (E13, E14), on the memory
twin, a Redis node and a Redis Cluster: ``ExecutionHandle.children()`` pages through the
executions a ``map`` or ``subflow`` node started, in item order with their statuses, and a
child's summary names its parent."""

from __future__ import annotations

import asyncio

import pytest

import plaita
from plaita.domain.errors import InvalidChildCursorError, UnknownExecutionError

from .conftest import HANDLER_MODULES, wait_for_status
from .test_child_nodes import COLLECT, MAP, PER_ITEM, SUBFLOW, WAITING_CHILD

pytestmark = pytest.mark.timeout(90)


async def every_page(handle: plaita.ExecutionHandle, limit: int) -> list[plaita.ExecutionPage]:
    pages = [await handle.children(limit=limit)]
    while pages[-1].next_cursor is not None:
        pages.append(await handle.children(cursor=pages[-1].next_cursor, limit=limit))
    return pages


async def test_a_maps_children_page_in_item_order_naming_their_parent(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(PER_ITEM)
        await client.register(MAP)
        handle = await client.start("sdk_map", {"items": list(range(12))})
        await handle.result(timeout=60)

        pages = await every_page(handle, limit=5)

    assert [len(page.items) for page in pages] == [5, 5, 2]
    children = [child for page in pages for child in page.items]
    assert [c.execution_id for c in children] == [
        f"{handle.execution_id}.each.{i}" for i in range(12)
    ]
    assert {c.status for c in children} == {plaita.ExecutionStatus.COMPLETED}
    assert {(c.flow_id, c.parent_id, c.parent_node_id) for c in children} == {
        ("sdk_per_item", handle.execution_id, "each")
    }


async def test_a_collecting_maps_children_show_which_item_failed(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(PER_ITEM)
        await client.register(COLLECT)
        handle = await client.start("sdk_collect", {"items": [1, -2, 3]})
        await handle.result(timeout=60)

        page = await handle.children()

    assert page.next_cursor is None
    assert [c.status for c in page.items] == [
        plaita.ExecutionStatus.COMPLETED,
        plaita.ExecutionStatus.ERROR,
        plaita.ExecutionStatus.COMPLETED,
    ]
    failed = page.items[1].error
    assert failed is not None and "item -2 is negative" in failed.message


async def test_a_subflows_child_is_listed_while_its_parent_waits_for_it(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(WAITING_CHILD)
        await client.register(SUBFLOW)
        handle = await client.start("sdk_subflow", {"n": 5})
        child = client.handle(f"{handle.execution_id}.child")
        await wait_for_status(child, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED, seconds=30)

        waiting = await handle.children()
        await client.publish("child.go", {"v": "yes"}, correlation_id=child.execution_id)
        await handle.result(timeout=60)
        ended = await handle.children()
        grandchildren = await child.children()

    assert [(c.execution_id, c.status) for c in waiting.items] == [
        (child.execution_id, plaita.ExecutionStatus.SUSPENDED)
    ]
    assert (waiting.items[0].parent_id, waiting.items[0].parent_node_id) == (
        handle.execution_id,
        "child",
    )
    assert [c.status for c in ended.items] == [plaita.ExecutionStatus.COMPLETED]
    assert grandchildren.items == () and grandchildren.next_cursor is None


async def test_an_execution_started_by_a_client_has_no_parent_and_no_children(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(WAITING_CHILD)
        handle = await client.start("sdk_waiting_child", {"n": 1})
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED, seconds=30)

        page = await handle.children()
        (listed,) = [s async for p in client.executions("sdk_waiting_child") for s in p.items]

    assert page.items == () and page.next_cursor is None
    assert (listed.parent_id, listed.parent_node_id) == (None, None)


async def test_children_of_an_unknown_execution_or_with_a_bad_cursor_are_refused() -> None:
    async with plaita.Client("memory://") as client:
        await client.register(PER_ITEM)
        await client.register(MAP)
        with pytest.raises(UnknownExecutionError, match="'nobody' does not exist"):
            await client.handle("nobody").children()
        handle = await client.start("sdk_map", {"items": [1]})
        with pytest.raises(InvalidChildCursorError, match="pass a previous page's next_cursor"):
            await handle.children(cursor="elsewhere:3")


async def test_a_sync_handle_lists_children_too(namespace: str) -> None:
    from .conftest import store_url

    url = store_url("redis")
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(PER_ITEM)
        await client.register(MAP)
        parent_id = (await client.start("sdk_map", {"items": [1, 2, 3]})).execution_id
        await client.handle(parent_id).result(timeout=60)

        def from_a_thread() -> list[str]:
            with plaita.SyncClient(url) as sync:
                page = sync.handle(parent_id).children(limit=2)
                rest = sync.handle(parent_id).children(cursor=page.next_cursor, limit=2)
                return [c.execution_id for c in page.items + rest.items]

        listed = await asyncio.to_thread(from_a_thread)

    assert listed == [f"{parent_id}.each.{i}" for i in range(3)]
