"""Cron schedules through the console API (W22, C1, C3, W24): who may do what, what a bad
value answers, and that a due and a trigger start executions the API then shows."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from dependency_injector import providers

from plaita.application.tenancy import tenant_scope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.container import Container

from ..unit.application.conftest import FakeClock
from .conftest import approval_document, auth

NOW = 1_767_225_600_000  # 2026-01-01 00:00 UTC
BASE = "/api/v1/schedules"


@pytest.fixture
def clock(container: Container) -> FakeClock:
    fake = FakeClock(NOW)
    container.clock.override(providers.Object(fake))
    return fake


@pytest.fixture
async def approval(container: Container, clock: FakeClock) -> None:
    with tenant_scope("default"):
        await container.flows().register(Flow.from_document(approval_document()), owner=SHARED)


def nightly(**fields: Any) -> dict[str, Any]:
    return {"schedule_id": "nightly", "flow_id": "approval", "cron": "0 3 * * *", **fields}


async def create(client: httpx.AsyncClient, who: str = "admin", **fields: Any) -> httpx.Response:
    return await client.post(BASE, json=nightly(**fields), headers=auth(who))


async def test_an_admin_creates_a_schedule_that_lists_with_its_next_run(
    client: httpx.AsyncClient, approval: None
) -> None:
    created = await create(client, timezone="Europe/Berlin", input={"amount": 5})

    assert created.status_code == 201, created.text
    body = created.json()
    assert body["schedule_id"] == "nightly" and body["paused"] is False
    assert body["overlap"] == "allow" and body["catch_up"] == "latest"
    # 03:00 in Berlin on 1 January is 02:00 UTC.
    assert body["next_run_ms"] == NOW + 2 * 3_600_000
    listed = await client.get(BASE, headers=auth("viewer"))
    assert [item["schedule_id"] for item in listed.json()["items"]] == ["nightly"]


async def test_a_schedule_keeps_the_priority_it_was_created_with(
    client: httpx.AsyncClient, approval: None
) -> None:
    created = await create(client, priority="high")

    assert created.status_code == 201, created.text
    assert created.json()["priority"] == "high"
    shown = await client.get(f"{BASE}/nightly", headers=auth("viewer"))
    assert shown.json()["priority"] == "high"


async def test_show_lists_the_next_run_times_asked_for(
    client: httpx.AsyncClient, approval: None
) -> None:
    await create(client)

    shown = await client.get(f"{BASE}/nightly", params={"count": 3}, headers=auth("viewer"))

    assert shown.status_code == 200
    runs = shown.json()["next_runs_ms"]
    assert runs == [NOW + 3 * 3_600_000 + day * 86_400_000 for day in range(3)]


@pytest.mark.parametrize("who", ["viewer", "operator"])
async def test_creating_needs_an_admin(client: httpx.AsyncClient, approval: None, who: str) -> None:
    refused = await create(client, who)

    assert refused.status_code == 403
    assert refused.json()["error"] == "RoleNotAllowedError"


@pytest.mark.parametrize(
    ("fields", "error", "field"),
    [
        ({"cron": "0 3 * *"}, "InvalidCronExpressionError", "cron"),
        ({"cron": "R 3 * * *"}, "InvalidCronExpressionError", "cron"),
        ({"cron": "0 0 30 2 *"}, "InvalidCronExpressionError", "cron"),
        ({"timezone": "Europe/Nowhere"}, "UnknownTimeZoneError", "timezone"),
        ({"overlap": "queue"}, "RequestValidationError", "overlap"),
        ({"catch_up": "some"}, "RequestValidationError", "catch_up"),
        ({"priority": "urgent"}, "RequestValidationError", "priority"),
        ({"input": [1, 2]}, "RequestValidationError", "input"),
        ({"schedule_id": "a/b"}, "RequestValidationError", "schedule_id"),
        ({"surprise": 1}, "RequestValidationError", "surprise"),
    ],
)
async def test_a_bad_value_is_a_422_naming_the_field(
    client: httpx.AsyncClient,
    approval: None,
    fields: dict[str, Any],
    error: str,
    field: str,
) -> None:
    refused = await create(client, **fields)

    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["error"] == error
    assert any(field in item["loc"] for item in body["field_errors"])
    assert (await client.get(BASE, headers=auth("admin"))).json()["items"] == []


async def test_an_unknown_flow_is_404_and_a_taken_id_409(
    client: httpx.AsyncClient, approval: None
) -> None:
    unknown = await create(client, flow_id="nowhere")
    assert (unknown.status_code, unknown.json()["error"]) == (404, "UnknownFlowError")

    assert (await create(client)).status_code == 201
    taken = await create(client, cron="0 4 * * *")
    assert (taken.status_code, taken.json()["error"]) == (409, "ScheduleExistsError")


async def test_a_tenant_sees_only_its_own_schedules(
    client: httpx.AsyncClient, approval: None
) -> None:
    """W24: acme's token acts for acme only; the same id is another schedule there."""
    assert (await create(client, "acme")).status_code == 403  # the default tenant is not acme's
    assert (await create(client, "acme", tenant="acme")).status_code == 201

    assert (await client.get(f"{BASE}/nightly", headers=auth("admin"))).status_code == 404
    mine = await client.get(f"{BASE}/nightly", params={"tenant": "acme"}, headers=auth("acme"))
    assert mine.status_code == 200 and mine.json()["tenant_id"] == "acme"


async def test_pause_resume_and_delete(client: httpx.AsyncClient, approval: None) -> None:
    await create(client)

    paused = await client.post(f"{BASE}/nightly/pause", headers=auth("admin"))
    assert paused.status_code == 200 and paused.json()["paused"] is True
    refused = await client.post(f"{BASE}/nightly/resume", headers=auth("operator"))
    assert refused.status_code == 403
    resumed = await client.post(f"{BASE}/nightly/resume", json={}, headers=auth("admin"))
    assert resumed.json()["paused"] is False

    deleted = await client.delete(f"{BASE}/nightly", headers=auth("admin"))
    assert deleted.json() == {"schedule_id": "nightly", "deleted": True}
    gone = await client.delete(f"{BASE}/nightly", headers=auth("admin"))
    assert (gone.status_code, gone.json()["error"]) == (404, "UnknownScheduleError")


async def test_an_operator_triggers_a_run_the_executions_api_shows(
    client: httpx.AsyncClient, approval: None
) -> None:
    await create(client, paused=True, input={"amount": 5})

    first = await client.post(f"{BASE}/nightly/trigger", headers=auth("operator"))
    second = await client.post(f"{BASE}/nightly/trigger", headers=auth("operator"))

    assert first.status_code == 201, first.text
    assert first.json()["dedup_key"].startswith("sched:nightly:manual:")
    assert first.json()["execution_id"] != second.json()["execution_id"]
    execution = await client.get(
        f"/api/v1/executions/{first.json()['execution_id']}", headers=auth("viewer")
    )
    assert execution.status_code == 200
    assert execution.json()["status"] == "pending" and execution.json()["input"] == {"amount": 5}
    viewer = await client.post(f"{BASE}/nightly/trigger", headers=auth("viewer"))
    assert viewer.status_code == 403


async def test_a_due_fired_by_the_scheduler_shows_on_the_schedule(
    client: httpx.AsyncClient, container: Container, clock: FakeClock, approval: None
) -> None:
    await create(client, cron="* * * * *", input={"amount": 5})
    clock.advance(65)

    report = await container.scheduler_tick()()

    [due] = report.dues
    shown = (await client.get(f"{BASE}/nightly", headers=auth("viewer"))).json()
    assert (shown["fired"], shown["last_due_ms"]) == (1, NOW + 60_000)
    assert shown["last_execution_id"] == due.execution_id
    assert shown["last_status"] == "pending"


async def test_the_schedule_routes_are_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]

    assert set(paths[BASE]) == {"get", "post"}
    assert set(paths[f"{BASE}/{{schedule_id}}"]) == {"get", "delete"}
    for action in ("pause", "resume", "trigger"):
        assert set(paths[f"{BASE}/{{schedule_id}}/{action}"]) == {"post"}
