"""POST /api/v1/executions with ``priority``, on the memory twin with the production worker
loop: the priority is recorded and the execution runs, a bad one is a 422 naming the field
and the allowed values, and the OpenAPI schema lists them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from plaita.entrypoints.container import Container

from .conftest import TERMINAL, auth, register_approval, snapshot, wait_for

pytestmark = pytest.mark.usefixtures("services")


async def accepted(client: httpx.AsyncClient, execution_id: str) -> dict[str, Any]:
    answer = await client.get(f"/api/v1/executions/{execution_id}/history", headers=auth("viewer"))
    assert answer.status_code == 200
    [entry] = [e for e in answer.json()["entries"] if e["kind"] == "accepted"]
    detail: dict[str, Any] = entry["detail"]
    return detail


@pytest.mark.parametrize("level", ["high", "low"])
async def test_a_start_with_a_priority_records_it_and_runs(
    client: httpx.AsyncClient, level: str
) -> None:
    await register_approval(client)
    body = {"flow_id": "approval", "input": {"amount": 5}, "priority": level}

    answer = await client.post("/api/v1/executions", json=body, headers=auth("operator"))

    assert answer.status_code == 201
    execution_id = answer.json()["execution_id"]
    assert (await wait_for(client, execution_id, TERMINAL))["status"] == "completed"
    assert (await accepted(client, execution_id))["priority"] == level


async def test_a_start_without_a_priority_is_normal(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    body = {"flow_id": "approval", "input": {"amount": 5}}

    answer = await client.post("/api/v1/executions", json=body, headers=auth("operator"))

    execution_id = answer.json()["execution_id"]
    assert (await wait_for(client, execution_id, TERMINAL))["status"] == "completed"
    assert "priority" not in await accepted(client, execution_id)


@pytest.mark.parametrize("level", ["urgent", "HIGH", "", 1, None])
async def test_a_bad_priority_is_a_422_naming_the_field_and_changes_nothing(
    client: httpx.AsyncClient, container: Container, level: object
) -> None:
    await register_approval(client)
    before = await snapshot(container)
    body = {"flow_id": "approval", "input": {"amount": 5}, "priority": level}

    answer = await client.post("/api/v1/executions", json=body, headers=auth("operator"))

    assert answer.status_code == 422
    assert "priority" in answer.text and "'high', 'normal' or 'low'" in answer.text
    assert await snapshot(container) == before


async def test_the_openapi_schema_lists_the_priorities(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    start = schema["components"]["schemas"]["StartExecutionRequest"]["properties"]["priority"]
    ref = start.get("$ref") or start["allOf"][0]["$ref"]
    levels = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["enum"]
    assert levels == ["high", "normal", "low"]
    assert start["default"] == "normal"
