"""Subflow and map nodes on a worker (E13, E14), through plaita.Client and plaita.Worker on
the memory twin, a Redis node and a Redis Cluster: children are executions of their own,
with ids derived from the parent's, their ends wake the parent (resume_type=child), results
come back in item order, failures go through the parent node's errorHandler, and a parent's
cancel or delete cancels the children still running.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import plaita

from .conftest import HANDLER_MODULES, wait_for_status

pytestmark = pytest.mark.timeout(90)

PER_ITEM: dict[str, Any] = {
    "flow_id": "sdk_per_item",
    "start": "work",
    "nodes": [
        {
            "id": "work",
            "type": "task",
            "handler": "tests.sdk.handlers:double",
            "params": {"n": "${item}"},
            "next": "out",
        },
        {"id": "out", "type": "end"},
    ],
}
WAITING_CHILD: dict[str, Any] = {
    "flow_id": "sdk_waiting_child",
    "start": "hold",
    "nodes": [
        {"id": "hold", "type": "event", "event_type": "child.go", "next": "out"},
        {"id": "out", "type": "end", "output": "{'told': $NODE['hold']['data']['v'], 'n': n}"},
    ],
}


def parent(node: dict[str, Any], flow_id: str = "sdk_parent") -> dict[str, Any]:
    return {
        "flow_id": flow_id,
        "start": node["id"],
        "nodes": [{**node, "next": "done"}, {"id": "done", "type": "end"}],
    }


MAP = parent(
    {
        "id": "each",
        "type": "map",
        "items": "$input.items",
        "flow_id": "sdk_per_item",
        "concurrency": 3,
    },
    "sdk_map",
)
COLLECT = parent(
    {
        "id": "each",
        "type": "map",
        "items": "$input.items",
        "flow_id": "sdk_per_item",
        "on_item_error": "collect",
    },
    "sdk_collect",
)
SUBFLOW = parent(
    {
        "id": "child",
        "type": "subflow",
        "flow_id": "sdk_waiting_child",
        "input": {"n": "${input.n}"},
    },
    "sdk_subflow",
)


async def test_a_map_gives_every_items_output_in_order(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(PER_ITEM)
        await client.register(MAP)
        handle = await client.start("sdk_map", {"items": list(range(12))})
        assert await handle.result(timeout=60) == [n * 2 for n in range(12)]
        child = await client.handle(f"{handle.execution_id}.each.4").result(timeout=5)
        assert child == 8  # each item is an execution of its own, with a derived id


async def test_a_map_that_collects_reports_each_item(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(PER_ITEM)
        await client.register(COLLECT)
        handle = await client.start("sdk_collect", {"items": [1, -2, 3]})
        result = await handle.result(timeout=60)
    assert result[0] == {"ok": True, "result": 2} and result[2] == {"ok": True, "result": 6}
    assert result[1]["ok"] is False and "item -2 is negative" in result[1]["error"]


async def test_a_map_that_fails_fails_the_parent_naming_the_item(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(PER_ITEM)
        await client.register(MAP)
        handle = await client.start("sdk_map", {"items": [1, 2, -3, 4]})
        with pytest.raises(plaita.ExecutionFailedError) as failed:
            await handle.result(timeout=60)
    assert failed.value.error.node_id == "each"
    assert "item 2 failed" in failed.value.error.message
    assert "item -3 is negative" in failed.value.error.message


async def test_a_subflow_waits_for_its_child_and_takes_its_output(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(WAITING_CHILD)
        await client.register(SUBFLOW)
        handle = await client.start("sdk_subflow", {"n": 5})
        child = client.handle(f"{handle.execution_id}.child")
        await wait_for_status(child, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await client.publish("child.go", {"v": "yes"}, correlation_id=child.execution_id)
        assert await handle.result(timeout=60) == {"told": "yes", "n": 5}


async def test_a_cancelled_child_fails_its_subflow_node(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(WAITING_CHILD)
        await client.register(SUBFLOW)
        handle = await client.start("sdk_subflow", {"n": 1})
        child = client.handle(f"{handle.execution_id}.child")
        await wait_for_status(child, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await child.cancel()
        with pytest.raises(plaita.ExecutionFailedError) as failed:
            await handle.result(timeout=60)
    assert failed.value.error.node_id == "child"
    assert f"child execution {child.execution_id} cancelled" in failed.value.error.message


async def test_cancelling_the_parent_cancels_its_running_child(url: str) -> None:
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(WAITING_CHILD)
        await client.register(SUBFLOW)
        handle = await client.start("sdk_subflow", {"n": 1})
        child = client.handle(f"{handle.execution_id}.child")
        await wait_for_status(child, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await handle.cancel()
        await wait_for_status(handle, plaita.ExecutionStatus.CANCELLED, seconds=30)
        await wait_for_status(child, plaita.ExecutionStatus.CANCELLED, seconds=30)


async def test_an_abandoning_parent_leaves_its_child_running(url: str) -> None:
    abandoning = parent(
        {
            "id": "child",
            "type": "subflow",
            "flow_id": "sdk_waiting_child",
            "input": {"n": 2},
            "on_parent_end": "abandon",
        },
        "sdk_abandoning",
    )
    async with plaita.Client(url) as client, plaita.Worker(client, handler_modules=HANDLER_MODULES):
        await client.register(WAITING_CHILD)
        await client.register(abandoning)
        handle = await client.start("sdk_abandoning", {})
        child = client.handle(f"{handle.execution_id}.child")
        await wait_for_status(handle, plaita.ExecutionStatus.SUSPENDED, seconds=30)
        await handle.cancel()
        await wait_for_status(handle, plaita.ExecutionStatus.CANCELLED, seconds=30)
        await asyncio.sleep(0.3)
        assert await child.status() is plaita.ExecutionStatus.SUSPENDED
