"""POST /api/v1/executions with ``target_instance_id`` (W25), on the memory twin with the
production worker loop: the target is recorded, a target that is not running is dropped and
the execution runs anyway, a bad one is a 422 that names the field."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from plaita.entrypoints.container import Container

from .conftest import TERMINAL, auth, register_approval, snapshot, wait_for

pytestmark = pytest.mark.usefixtures("services")


async def history(client: httpx.AsyncClient, execution_id: str) -> list[dict[str, Any]]:
    answer = await client.get(f"/api/v1/executions/{execution_id}/history", headers=auth("viewer"))
    assert answer.status_code == 200
    entries: list[dict[str, Any]] = answer.json()["entries"]
    return entries


async def test_a_start_for_this_worker_runs_here_and_records_its_target(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    me = container.config.consumer_name()
    body = {"flow_id": "approval", "input": {"amount": 5}, "target_instance_id": me}

    answer = await client.post("/api/v1/executions", json=body, headers=auth("operator"))

    assert answer.status_code == 201
    execution_id = answer.json()["execution_id"]
    assert (await wait_for(client, execution_id, TERMINAL))["status"] == "completed"
    entries = await history(client, execution_id)
    by_kind = {entry["kind"]: entry for entry in entries}
    assert by_kind["accepted"]["detail"]["target"] == me
    assert by_kind["started"]["worker"] == me
    assert "target_stripped" not in by_kind and "handed_over" not in by_kind


async def test_a_start_for_an_instance_that_is_not_running_runs_anyway(
    client: httpx.AsyncClient,
) -> None:
    await register_approval(client)
    body = {"flow_id": "approval", "input": {"amount": 5}, "target_instance_id": "gone-7"}

    answer = await client.post("/api/v1/executions", json=body, headers=auth("operator"))

    execution_id = answer.json()["execution_id"]
    assert (await wait_for(client, execution_id, TERMINAL))["status"] == "completed"
    [stripped] = [e for e in await history(client, execution_id) if e["kind"] == "target_stripped"]
    assert stripped["detail"] == {"target": "gone-7", "handovers": 0, "reason": "target_absent"}


@pytest.mark.parametrize("target", ["", "two words", "a/b", "x" * 129, 7])
async def test_a_bad_target_is_a_422_naming_the_field_and_changes_nothing(
    client: httpx.AsyncClient, container: Container, target: object
) -> None:
    await register_approval(client)
    before = await snapshot(container)
    body = {"flow_id": "approval", "input": {"amount": 5}, "target_instance_id": target}

    answer = await client.post("/api/v1/executions", json=body, headers=auth("operator"))

    assert answer.status_code == 422
    assert "target_instance_id" in answer.text
    assert await snapshot(container) == before
