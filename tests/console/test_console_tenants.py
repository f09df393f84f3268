"""The console's tenant endpoints (W24, C1, C3): list, show, suspend, resume, quota.

Reading needs an operator token and shows only the token's tenants; writing needs an admin
token of every tenant. A suspended tenant's starts are accepted (201) and held until it is
resumed; bad input is a 4xx naming the problem.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import Container

from .conftest import TOKENS, auth, register_approval, running_services, start, wait_for

ACME_OPERATOR = {
    "token": "acme-operator-secret-0123456789",
    "name": "acme-ops",
    "role": "operator",
    "tenants": ["acme"],
}


async def test_a_tenant_is_suspended_shown_listed_and_resumed(client: httpx.AsyncClient) -> None:
    suspended = await client.post("/api/v1/tenants/acme/suspend", headers=auth("admin"))
    assert suspended.status_code == 200, suspended.text
    assert {
        "outcome": "suspended",
        "status": "suspended",
        "version": 1,
    }.items() <= suspended.json().items()

    shown = await client.get("/api/v1/tenants/acme", headers=auth("operator"))
    assert shown.status_code == 200, shown.text
    assert {
        "tenant_id": "acme",
        "status": "suspended",
        "recorded": True,
        "parked": 0,
        "workers": "park",
    }.items() <= shown.json().items()
    listed = await client.get("/api/v1/tenants", headers=auth("operator"))
    assert [item["tenant_id"] for item in listed.json()["items"]] == ["acme"]

    resumed = await client.post("/api/v1/tenants/acme/resume", headers=auth("admin"))
    assert {
        "outcome": "resumed",
        "status": "active",
        "requeued": 0,
    }.items() <= resumed.json().items()


async def test_a_tenant_without_a_record_is_shown_active(client: httpx.AsyncClient) -> None:
    shown = await client.get("/api/v1/tenants/globex", headers=auth("operator"))
    assert shown.status_code == 200, shown.text
    assert {"status": "active", "recorded": False, "workers": "run"}.items() <= shown.json().items()


async def test_a_quota_is_set_and_cleared(client: httpx.AsyncClient) -> None:
    answer = await client.put(
        "/api/v1/tenants/acme/quota", json={"max_running": 25}, headers=auth("admin")
    )
    assert answer.status_code == 200, answer.text
    assert {"outcome": "quota_set", "max_running": 25}.items() <= answer.json().items()

    cleared = await client.put(
        "/api/v1/tenants/acme/quota", json={"max_running": None}, headers=auth("admin")
    )
    assert cleared.json()["max_running"] is None


@pytest.mark.parametrize(
    "body", [{"max_running": 0}, {"max_running": 1_000_001}, {"max_running": "5"}, {}, {"x": 1}]
)
async def test_a_bad_quota_is_422_naming_the_field(
    client: httpx.AsyncClient, container: Container, body: dict[str, object]
) -> None:
    answer = await client.put("/api/v1/tenants/acme/quota", json=body, headers=auth("admin"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["field_errors"]
    assert await container.tenants().get("acme") is None


async def test_a_bad_tenant_id_is_422(client: httpx.AsyncClient) -> None:
    answer = await client.post("/api/v1/tenants/bad%20id/suspend", headers=auth("admin"))
    assert answer.status_code == 422, answer.text


async def test_suspending_the_default_tenant_is_a_named_409(
    client: httpx.AsyncClient, container: Container
) -> None:
    answer = await client.post("/api/v1/tenants/default/suspend", headers=auth("admin"))
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "TenantActionRefusedError"
    assert "cannot be suspended" in answer.json()["message"]
    assert await container.tenants().get("default") is None


async def test_a_tenant_admin_cannot_change_its_own_status_or_quota(
    client: httpx.AsyncClient, container: Container
) -> None:
    for method, path, body in [
        ("POST", "/api/v1/tenants/acme/suspend", None),
        ("POST", "/api/v1/tenants/acme/resume", None),
        ("PUT", "/api/v1/tenants/acme/quota", {"max_running": 100}),
    ]:
        answer = await client.request(method, path, json=body, headers=auth("acme"))
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"] == "DeploymentActionNotAllowedError"
    assert await container.tenants().list() == []


async def test_a_tenant_scoped_token_reads_only_its_tenants(container: Container) -> None:
    app = create_app(container, tokens=[*TOKENS.values(), ACME_OPERATOR])
    headers = {"Authorization": f"Bearer {ACME_OPERATOR['token']}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        for tenant in ("acme", "globex"):
            written = await http.post(f"/api/v1/tenants/{tenant}/suspend", headers=auth("admin"))
            assert written.status_code == 200, written.text

        listed = await http.get("/api/v1/tenants", headers=headers)
        other = await http.get("/api/v1/tenants/globex", headers=headers)
        own = await http.get("/api/v1/tenants/acme", headers=headers)

    assert [item["tenant_id"] for item in listed.json()["items"]] == ["acme"]
    assert other.status_code == 403 and other.json()["error"] == "TenantNotAllowedError"
    assert own.status_code == 200


async def test_a_suspended_tenants_start_is_accepted_held_and_resumed(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    await client.post("/api/v1/tenants/acme/suspend", headers=auth("admin"))
    async with running_services(container):
        execution_id = await start(client, 10, tenant="acme", who="admin")
        shown: dict[str, object] = {}
        for _ in range(200):
            shown = (await client.get("/api/v1/tenants/acme", headers=auth("operator"))).json()
            if shown["parked"] == 1:
                break
            await asyncio.sleep(0.02)
        assert shown["parked"] == 1, shown
        detail = await client.get(
            f"/api/v1/executions/{execution_id}",
            params={"tenant": "acme"},
            headers=auth("viewer"),
        )
        assert detail.json()["status"] == "pending"

        resumed = await client.post("/api/v1/tenants/acme/resume", headers=auth("admin"))
        assert resumed.json()["requeued"] == 1
        await wait_for(client, execution_id, {"completed"}, tenant="acme")
