"""Searching executions through the API (C1): creation window and input conditions, on the
listing and on bulk actions, and each unreadable filter refused by name."""

from __future__ import annotations

import httpx
import pytest

from .conftest import TERMINAL, auth, register_approval, start, wait_for

pytestmark = pytest.mark.usefixtures("services")


async def listed(client: httpx.AsyncClient, **params: object) -> list[str]:
    answer = await client.get("/api/v1/executions", params=params, headers=auth("viewer"))
    assert answer.status_code == 200, answer.text
    return [item["execution_id"] for item in answer.json()["items"]]


async def test_an_input_condition_finds_the_execution_by_its_input(
    client: httpx.AsyncClient,
) -> None:
    await register_approval(client)
    small, large = await start(client, 10), await start(client, 5000)
    await wait_for(client, small, TERMINAL)

    assert await listed(client, input="amount = 10") == [small]
    assert await listed(client, input="amount=5000", flow_id="approval") == [large]
    assert await listed(client, input="amount = 11") == []


async def test_the_creation_window_limits_the_listing(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    first = await start(client, 10)
    detail = await wait_for(client, first, TERMINAL)
    created = detail["created_at_ms"]

    assert await listed(client, created_from_ms=created, created_to_ms=created) == [first]
    assert await listed(client, created_from_ms=created + 1) == []
    assert await listed(client, created_to_ms=created - 1) == []


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"input": "amount"}, "input"),
        ({"input": "= 3"}, "input"),
        ({"created_from_ms": 10, "created_to_ms": 9}, "created_to_ms"),
    ],
)
async def test_an_unreadable_filter_is_a_named_422_naming_the_parameter(
    client: httpx.AsyncClient, params: dict[str, object], parameter: str
) -> None:
    answer = await client.get("/api/v1/executions", params=params, headers=auth("viewer"))
    assert answer.status_code == 422
    body = answer.json()
    assert body["error"] == "InvalidExecutionQueryError"
    assert body["message"].startswith(f"{parameter}: ")
    assert body["field_errors"][0]["loc"] == [parameter]


@pytest.mark.parametrize("params", [{"created_from_ms": "yesterday"}, {"created_to_ms": -1}])
async def test_a_time_that_is_not_a_number_is_a_422_naming_the_parameter(
    client: httpx.AsyncClient, params: dict[str, object]
) -> None:
    answer = await client.get("/api/v1/executions", params=params, headers=auth("viewer"))
    assert answer.status_code == 422
    [name] = params
    assert [e["loc"] for e in answer.json()["field_errors"]] == [["query", name]]


async def test_a_bulk_action_acts_on_what_the_search_shows(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    keep, cancel = await start(client, 5000), await start(client, 6000)
    for execution_id in (keep, cancel):
        await wait_for(client, execution_id, {"suspended"})
    body = {"action": "cancel", "input": "amount = 6000", "status": "suspended"}

    counted = await client.post(
        "/api/v1/executions/bulk", json={**body, "dry_run": True}, headers=auth("operator")
    )
    assert counted.status_code == 200, counted.text
    assert (counted.json()["matched"], counted.json()["execution_ids"]) == (1, [cancel])

    done = await client.post("/api/v1/executions/bulk", json=body, headers=auth("operator"))
    assert done.json()["done"] == 1
    assert (await wait_for(client, cancel, TERMINAL))["status"] == "cancelled"
    assert (await wait_for(client, keep, {"suspended"}))["status"] == "suspended"


async def test_a_bulk_action_names_an_unreadable_filter(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/api/v1/executions/bulk",
        json={"action": "cancel", "input": "nope", "dry_run": True},
        headers=auth("operator"),
    )
    assert answer.status_code == 422
    assert answer.json()["error"] == "InvalidExecutionQueryError"


async def test_the_search_parameters_are_documented_in_openapi(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    parameters = {p["name"]: p for p in spec["paths"]["/api/v1/executions"]["get"]["parameters"]}
    assert {"created_from_ms", "created_to_ms", "input"} <= set(parameters)
    assert "customer.id = 42" in parameters["input"]["description"]
