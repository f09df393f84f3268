"""The console API on a parent's children and a child's parent (C1, E13, E14), on the memory
twin with the production worker loop: ``GET /api/v1/executions/{id}/children`` pages through
what a subflow and a map started, and a child's detail and summary name its parent."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import TERMINAL, auth, wait_for

pytestmark = pytest.mark.usefixtures("services")

ITEM: dict[str, Any] = {
    "flow_id": "console_item",
    "start": "out",
    "nodes": [{"id": "out", "type": "end", "output": "item * 10"}],
}
HOLD: dict[str, Any] = {
    "flow_id": "console_hold",
    "start": "hold",
    "nodes": [
        {"id": "hold", "type": "event", "event_type": "child.go", "next": "out"},
        {"id": "out", "type": "end"},
    ],
}
PARENT: dict[str, Any] = {
    "flow_id": "console_parent",
    "start": "check",
    "nodes": [
        {"id": "check", "type": "subflow", "flow_id": "console_hold", "next": "each"},
        {
            "id": "each",
            "type": "map",
            "items": "$input.items",
            "flow_id": "console_item",
            "concurrency": 2,
            "next": "done",
        },
        {"id": "done", "type": "end", "output": "$NODE['each']"},
    ],
}


async def register(client: httpx.AsyncClient, *documents: dict[str, Any]) -> None:
    for document in documents:
        answer = await client.post(
            "/api/v1/flows", json={**document, "shared": True}, headers=auth("admin")
        )
        assert answer.status_code == 201, answer.text


async def start(client: httpx.AsyncClient, flow_id: str, data: dict[str, Any]) -> str:
    answer = await client.post(
        "/api/v1/executions", json={"flow_id": flow_id, "input": data}, headers=auth("operator")
    )
    assert answer.status_code == 201, answer.text
    execution_id: str = answer.json()["execution_id"]
    return execution_id


async def children(client: httpx.AsyncClient, execution_id: str, **params: Any) -> dict[str, Any]:
    answer = await client.get(
        f"/api/v1/executions/{execution_id}/children", params=params, headers=auth("viewer")
    )
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def listed(page: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(c["execution_id"], c["status"], c["parent_id"]) for c in page["items"]]


async def started_parent(client: httpx.AsyncClient) -> str:
    """A parent of console_parent over three items, done: its subflow's child was told to go."""
    await register(client, ITEM, HOLD, PARENT)
    parent = await start(client, "console_parent", {"items": [1, 2, 3]})
    await wait_for(client, f"{parent}.check", {"suspended"})
    published = await client.post(
        "/api/v1/events",
        json={"event_type": "child.go", "correlation_id": f"{parent}.check"},
        headers=auth("operator"),
    )
    assert published.status_code == 201, published.text
    done = await wait_for(client, parent, TERMINAL)
    assert done["status"] == "completed" and done["result"] == [10, 20, 30]
    return parent


async def test_a_subflows_child_is_listed_while_the_parent_waits_for_it(
    client: httpx.AsyncClient,
) -> None:
    await register(client, ITEM, HOLD, PARENT)
    parent = await start(client, "console_parent", {"items": [1]})
    await wait_for(client, f"{parent}.check", {"suspended"})
    await wait_for(client, parent, {"suspended"})

    page = await children(client, parent)

    assert listed(page) == [(f"{parent}.check", "suspended", parent)]
    assert page["items"][0]["flow_id"] == "console_hold" and page["next_cursor"] is None


async def test_children_page_in_node_then_item_order(client: httpx.AsyncClient) -> None:
    parent = await started_parent(client)

    first = await children(client, parent, limit=2)
    rest = await children(client, parent, limit=2, cursor=first["next_cursor"])

    assert listed(first) == [
        (f"{parent}.check", "completed", parent),
        (f"{parent}.each.0", "completed", parent),
    ]
    assert first["next_cursor"] == "each:1"
    assert listed(rest) == [
        (f"{parent}.each.1", "completed", parent),
        (f"{parent}.each.2", "completed", parent),
    ]
    assert rest["next_cursor"] is None


async def test_a_childs_detail_and_summary_name_its_parent(client: httpx.AsyncClient) -> None:
    parent = await started_parent(client)

    item = await wait_for(client, f"{parent}.each.2", TERMINAL)
    subflow_child = await wait_for(client, f"{parent}.check", TERMINAL)
    own = await wait_for(client, parent, TERMINAL)
    listing = await client.get(
        "/api/v1/executions", params={"flow_id": "console_item"}, headers=auth("viewer")
    )

    assert item["parent"] == {"execution_id": parent, "node_id": "each", "index": 2}
    assert item["parent_id"] == parent and item["result"] == 30
    assert subflow_child["parent"] == {"execution_id": parent, "node_id": "check", "index": None}
    assert own["parent"] is None and own["parent_id"] is None
    assert sorted(s["parent_id"] for s in listing.json()["items"]) == [parent] * 3


async def test_an_execution_without_child_nodes_has_an_empty_page(
    client: httpx.AsyncClient,
) -> None:
    await register(client, ITEM)
    execution_id = await start(client, "console_item", {"item": 4})
    await wait_for(client, execution_id, TERMINAL)

    assert await children(client, execution_id) == {"items": [], "next_cursor": None}


@pytest.mark.parametrize("cursor", ["each", "each:-1", "nowhere:0", "check:1"])
async def test_a_bad_cursor_is_422_saying_what_to_pass(
    client: httpx.AsyncClient, cursor: str
) -> None:
    await register(client, ITEM, HOLD, PARENT)
    parent = await start(client, "console_parent", {"items": []})
    await wait_for(client, parent, {"suspended"})

    answer = await client.get(
        f"/api/v1/executions/{parent}/children",
        params={"cursor": cursor},
        headers=auth("viewer"),
    )

    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "InvalidChildCursorError"
    assert "pass a previous page's next_cursor" in answer.json()["message"]


async def test_children_of_an_unknown_or_another_tenants_execution_are_404(
    client: httpx.AsyncClient,
) -> None:
    await register(client, ITEM, HOLD, PARENT)
    parent = await start(client, "console_parent", {"items": []})
    await wait_for(client, parent, {"suspended"})

    unknown = await client.get("/api/v1/executions/nobody/children", headers=auth("viewer"))
    elsewhere = await client.get(
        f"/api/v1/executions/{parent}/children", params={"tenant": "acme"}, headers=auth("acme")
    )
    refused = await client.get(f"/api/v1/executions/{parent}/children", headers=auth("acme"))

    assert (unknown.status_code, unknown.json()["error"]) == (404, "UnknownExecutionError")
    assert (elsewhere.status_code, elsewhere.json()["error"]) == (404, "UnknownExecutionError")
    assert refused.status_code == 403  # the acme token does not act for the default tenant


async def test_a_page_limit_out_of_bounds_is_422(client: httpx.AsyncClient) -> None:
    answer = await client.get(
        "/api/v1/executions/nobody/children", params={"limit": 0}, headers=auth("viewer")
    )
    assert answer.status_code == 422 and answer.json()["field_errors"]


async def test_a_parent_waiting_for_its_children_says_for_which(
    client: httpx.AsyncClient,
) -> None:
    held_map = {
        "flow_id": "console_held_map",
        "start": "each",
        "nodes": [
            {"id": "each", "type": "map", "items": "$input.items", "flow_id": "console_hold",
             "concurrency": 2, "next": "done"},
            {"id": "done", "type": "end"},
        ],
    }  # fmt: skip
    await register(client, ITEM, HOLD, PARENT, held_map)
    on_subflow = await start(client, "console_parent", {"items": []})
    on_map = await start(client, "console_held_map", {"items": [1, 2, 3]})
    await wait_for(client, f"{on_map}.each.1", {"suspended"})

    subflow_wait = (await wait_for(client, on_subflow, {"suspended"}))["waiting_for"]
    map_wait = (await wait_for(client, on_map, {"suspended"}))["waiting_for"]

    assert subflow_wait["child_id"] == f"{on_subflow}.check"
    assert subflow_wait["children"] is None
    assert map_wait["child_id"] is None
    assert map_wait["children"] == {"total": 3, "started": 2, "succeeded": 0, "failed": 0}
