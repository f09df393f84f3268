"""Who may call what, for which tenant (C3, W24).

The matrix lists every endpoint of the API with the least role it needs: without a token or
with an unknown one it is 401, one role below it is 403, at the role it is let through. A
refused request changes nothing. A token scoped to tenant ``acme`` cannot read or act on the
``default`` tenant's executions, and listings show the requested tenant only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import httpx
import pytest
from fastapi import FastAPI

from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import Container

from .conftest import (
    TOKENS,
    approval_document,
    auth,
    register_approval,
    running_services,
    snapshot,
    start,
    wait_for,
)

ROLE_BELOW = {"operator": "viewer", "admin": "operator"}
X = "some-execution"


@attrs.frozen
class Endpoint:
    method: str
    path: str
    role: str
    body: Any = None

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


ENDPOINTS = [
    Endpoint("GET", "/metrics", "viewer"),
    Endpoint("GET", "/api/v1/executions", "viewer"),
    Endpoint("GET", f"/api/v1/executions/{X}", "viewer"),
    Endpoint("GET", f"/api/v1/executions/{X}/history", "viewer"),
    Endpoint("GET", f"/api/v1/executions/{X}/children", "viewer"),
    Endpoint("POST", "/api/v1/executions", "operator", {"flow_id": "approval"}),
    Endpoint("POST", f"/api/v1/executions/{X}/resume", "operator", {}),
    Endpoint("POST", f"/api/v1/executions/{X}/retry", "operator", {}),
    Endpoint("POST", f"/api/v1/executions/{X}/cancel", "operator", {}),
    Endpoint("POST", f"/api/v1/executions/{X}/pause", "operator", {}),
    Endpoint("POST", f"/api/v1/executions/{X}/unpause", "operator", {}),
    Endpoint("POST", "/api/v1/executions/bulk", "operator", {"action": "pause"}),
    Endpoint("DELETE", f"/api/v1/executions/{X}", "admin"),
    Endpoint("POST", "/api/v1/events", "operator", {"event_type": "ping"}),
    Endpoint("GET", "/api/v1/events", "viewer"),
    Endpoint("GET", "/api/v1/events/some-event", "viewer"),
    Endpoint("GET", "/api/v1/queue", "viewer"),
    Endpoint("GET", "/api/v1/dlq", "admin"),
    Endpoint("GET", "/api/v1/dlq/1-0", "admin"),
    Endpoint("POST", "/api/v1/dlq/1-0/replay", "admin", {}),
    Endpoint("GET", "/api/v1/workers", "viewer"),
    Endpoint("GET", "/api/v1/whoami", "viewer"),
    Endpoint("GET", "/api/v1/config", "viewer"),
    Endpoint("GET", "/api/v1/flows", "viewer"),
    Endpoint("GET", "/api/v1/flows/approval", "viewer"),
    Endpoint("GET", "/api/v1/flows/approval/versions", "viewer"),
    Endpoint("POST", "/api/v1/flows", "admin", {**approval_document(), "version": "7"}),
    # W22: reading schedules is a viewer's, changing them an admin's, a run now an operator's.
    Endpoint("GET", "/api/v1/schedules", "viewer"),
    Endpoint("GET", "/api/v1/schedules/nightly", "viewer"),
    Endpoint(
        "POST",
        "/api/v1/schedules",
        "admin",
        {"schedule_id": "nightly", "flow_id": "approval", "cron": "0 3 * * *"},
    ),
    Endpoint("POST", "/api/v1/schedules/nightly/pause", "admin", {}),
    Endpoint("POST", "/api/v1/schedules/nightly/resume", "admin", {}),
    Endpoint("POST", "/api/v1/schedules/nightly/trigger", "operator", {}),
    Endpoint("DELETE", "/api/v1/schedules/nightly", "admin"),
    Endpoint("GET", "/api/v1/tenants", "operator"),
    Endpoint("GET", "/api/v1/tenants/acme", "operator"),
    Endpoint("POST", "/api/v1/tenants/acme/suspend", "admin"),
    Endpoint("POST", "/api/v1/tenants/acme/resume", "admin"),
    Endpoint("PUT", "/api/v1/tenants/acme/quota", "admin", {"max_running": 3}),
    Endpoint("GET", "/api/v1/hooks", "admin"),
    Endpoint("GET", "/api/v1/hooks/some-hook", "admin"),
    Endpoint("DELETE", "/api/v1/hooks/some-hook", "admin"),
    Endpoint(
        "POST",
        "/api/v1/hooks",
        "admin",
        {
            "name": "matrix",
            "event_type": "ping",
            "correlation_id_pointer": "/id",
            "secret": "whsec-0123456789abcdef",
        },
    ),
]
OPEN = ["/healthz", "/readyz", "/", "/openapi.json", "/docs"]
#: Authenticated by a signature, not a token (V10): tests/console/test_console_hooks.py.
SIGNED = ["/hooks/{name}"]


async def call(
    client: httpx.AsyncClient, endpoint: Endpoint, headers: dict[str, str] | None = None
) -> httpx.Response:
    return await client.request(
        endpoint.method, endpoint.path, json=endpoint.body, headers=headers or {}
    )


def test_the_matrix_covers_every_operation_of_the_api(app: FastAPI) -> None:
    operations = {
        f"{method.upper()} {path}"
        for path, item in app.openapi()["paths"].items()
        for method in item
        if path not in OPEN and path not in SIGNED
    }
    covered = {
        f"{e.method} {e.path.replace(X, '{execution_id}')}".replace("/some-event", "/{event_id}")
        .replace("/1-0", "/{dlq_id}")
        .replace("/flows/approval", "/flows/{flow_id}")
        .replace("/schedules/nightly", "/schedules/{schedule_id}")
        .replace("/hooks/some-hook", "/hooks/{name}")
        .replace("/tenants/acme", "/tenants/{tenant_id}")
        for e in ENDPOINTS
    }
    assert operations == covered


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.label)
async def test_without_a_token_is_401(
    client: httpx.AsyncClient, container: Container, endpoint: Endpoint
) -> None:
    await register_approval(client)
    before = await snapshot(container)
    answer = await call(client, endpoint)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == "MissingTokenError"
    assert answer.headers["www-authenticate"] == "Bearer"
    assert await snapshot(container) == before


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.label)
async def test_an_unknown_token_is_401(
    client: httpx.AsyncClient, container: Container, endpoint: Endpoint
) -> None:
    await register_approval(client)
    before = await snapshot(container)
    near_miss = TOKENS["admin"]["token"] + "x"
    answer = await call(client, endpoint, {"Authorization": f"Bearer {near_miss}"})
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == "UnknownTokenError"
    assert near_miss not in answer.text
    assert await snapshot(container) == before


@pytest.mark.parametrize(
    "endpoint", [e for e in ENDPOINTS if e.role in ROLE_BELOW], ids=lambda e: e.label
)
async def test_one_role_below_the_minimum_is_403(
    client: httpx.AsyncClient, container: Container, endpoint: Endpoint
) -> None:
    await register_approval(client)
    before = await snapshot(container)
    below = ROLE_BELOW[endpoint.role]
    answer = await call(client, endpoint, auth(below))
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == "RoleNotAllowedError"
    assert f"needs {endpoint.role} or above" in answer.json()["message"]
    assert await snapshot(container) == before


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.label)
async def test_the_minimum_role_is_let_through(
    client: httpx.AsyncClient, endpoint: Endpoint
) -> None:
    await register_approval(client)
    answer = await call(client, endpoint, auth(endpoint.role))
    assert answer.status_code not in (401, 403), answer.text
    # Let through, then answered by the endpoint itself: found, done, or a named 404/409.
    assert answer.status_code in (200, 201, 202, 404, 409), answer.text


@pytest.mark.parametrize("path", OPEN)
async def test_health_the_page_and_the_docs_need_no_token(
    client: httpx.AsyncClient, path: str
) -> None:
    answer = await client.get(path)
    assert answer.status_code == 200, answer.text


async def test_a_non_bearer_authorization_is_401(client: httpx.AsyncClient) -> None:
    answer = await client.get(
        "/api/v1/queue", headers={"Authorization": f"Basic {TOKENS['admin']['token']}"}
    )
    assert answer.status_code == 401
    assert answer.json()["error"] == "MissingTokenError"


# --- tenants (C3, W24) ----------------------------------------------------------------------


@pytest.fixture
async def default_execution(client: httpx.AsyncClient, container: Container) -> AsyncIterator[str]:
    """An execution of tenant default, suspended at its approval wait."""
    await register_approval(client)
    async with running_services(container):
        execution_id = await start(client, 5000, who="admin")
        await wait_for(client, execution_id, {"suspended"})
        yield execution_id


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/v1/executions/{x}?tenant=default", None),
        ("GET", "/api/v1/executions?tenant=default", None),
        ("DELETE", "/api/v1/executions/{x}?tenant=default", None),
        ("POST", "/api/v1/executions/{x}/resume", {"tenant": "default"}),
        ("POST", "/api/v1/executions/{x}/retry", {"tenant": "default", "from_node": "check"}),
        ("POST", "/api/v1/executions/{x}/cancel", {"tenant": "default"}),
        ("POST", "/api/v1/executions/{x}/pause", {"tenant": "default"}),
        ("POST", "/api/v1/executions/{x}/unpause", {"tenant": "default"}),
        ("POST", "/api/v1/executions/bulk", {"tenant": "default", "action": "cancel"}),
        ("POST", "/api/v1/executions", {"tenant": "default", "flow_id": "approval"}),
        ("POST", "/api/v1/events", {"tenant": "default", "event_type": "approval_decision"}),
        ("GET", "/api/v1/events?tenant=default", None),
        ("GET", "/api/v1/dlq?tenant=default", None),
        ("POST", "/api/v1/dlq/1-0/replay", {"tenant": "default"}),
        ("GET", "/api/v1/queue?tenant=default", None),
    ],
)
async def test_a_token_of_acme_may_not_act_for_default(
    client: httpx.AsyncClient,
    container: Container,
    default_execution: str,
    method: str,
    path: str,
    body: Any,
) -> None:
    before = await snapshot(container)
    answer = await client.request(
        method, path.format(x=default_execution), json=body, headers=auth("acme")
    )
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == "TenantNotAllowedError"
    assert "'acme-root' may act for tenants ['acme'], not for 'default'" in answer.json()["message"]
    assert await snapshot(container) == before


async def test_another_tenants_execution_is_not_there(
    client: httpx.AsyncClient, default_execution: str
) -> None:
    """Acting for its own tenant, acme does not see default's execution at all (404)."""
    for answer in (
        await client.get(
            f"/api/v1/executions/{default_execution}",
            params={"tenant": "acme"},
            headers=auth("acme"),
        ),
        await client.post(
            f"/api/v1/executions/{default_execution}/cancel",
            json={"tenant": "acme"},
            headers=auth("acme"),
        ),
    ):
        assert answer.status_code == 404
        assert answer.json()["error"] == "UnknownExecutionError"
    mine = await client.get(f"/api/v1/executions/{default_execution}", headers=auth("admin"))
    assert mine.status_code == 200


async def test_listings_show_the_requested_tenant_only(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    async with running_services(container):
        ours = await start(client, 5000, who="admin")
        theirs = await start(client, 5000, tenant="acme", who="acme")
        await wait_for(client, ours, {"suspended"})
        await wait_for(client, theirs, {"suspended"}, tenant="acme")
        for tenant, who, expected in (("default", "admin", ours), ("acme", "acme", theirs)):
            listed = await client.get(
                "/api/v1/executions", params={"tenant": tenant}, headers=auth(who)
            )
            assert [i["execution_id"] for i in listed.json()["items"]] == [expected]
            assert listed.json()["items"][0]["tenant_id"] == tenant

        await client.post(
            "/api/v1/events",
            json={"tenant": "acme", "event_type": "approval_decision", "correlation_id": theirs},
            headers=auth("acme"),
        )
        acme_events = await client.get(
            "/api/v1/events", params={"tenant": "acme"}, headers=auth("acme")
        )
        default_events = await client.get("/api/v1/events", headers=auth("admin"))
        [event] = acme_events.json()["items"]
        assert event["tenant_id"] == "acme"
        assert default_events.json() == {"items": []}
        hidden = await client.get(f"/api/v1/events/{event['event_id']}", headers=auth("admin"))
        assert hidden.status_code == 404
        # acme's decision resumes acme's execution, never default's (W24).
        await wait_for(client, theirs, {"completed"}, tenant="acme")
        still = await client.get(f"/api/v1/executions/{ours}", headers=auth("admin"))
        assert still.json()["status"] == "suspended"


async def test_the_same_id_in_two_tenants_is_two_executions(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    async with running_services(container):
        for tenant, who, amount in (("default", "admin", 1), ("acme", "acme", 5000)):
            answer = await client.post(
                "/api/v1/executions",
                json={
                    "flow_id": "approval",
                    "execution_id": "shared",
                    "tenant": tenant,
                    "input": {"amount": amount},
                },
                headers=auth(who),
            )
            assert answer.status_code == 201
        assert (await wait_for(client, "shared", {"completed"}))["input"] == {"amount": 1}
        acme = await wait_for(client, "shared", {"suspended"}, tenant="acme")
        assert acme["input"] == {"amount": 5000}


async def test_an_invalid_tenant_name_is_422_not_403(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/executions", params={"tenant": "a:b"}, headers=auth("admin"))
    assert answer.status_code == 422
    assert answer.json()["field_errors"][0]["loc"] == ["query", "tenant"]


# --- dev mode -------------------------------------------------------------------------------


async def test_dev_mode_lets_requests_without_a_token_act_as_admin(container: Container) -> None:
    app = create_app(container, tokens=[], dev_mode=True)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        anonymous = await http.get("/api/v1/dlq", params={"tenant": "acme"})
        wrong = await http.get("/api/v1/dlq", headers=auth("admin"))
    assert anonymous.status_code == 200
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "UnknownTokenError"
