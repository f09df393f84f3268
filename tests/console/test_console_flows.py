"""Flow definitions through the console: whose they are, who may register them, and that a
registered version never changes (C1, C3, S2, W24; ADR 0011).

A request registers into the tenant it acts for, or — with ``"shared": true`` — into the
deployment-wide catalogue, which only an admin of every tenant may write. A tenant's lookups,
listings and executions see its own definitions first, then the shared ones, never another
tenant's. The same document again answers 200, another document under a registered version
409 with both fingerprints; a refused request changes no catalogue.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import fakeredis
import httpx
import pytest
from click.testing import CliRunner
from dependency_injector import providers
from fastapi import FastAPI

from plaita.domain.flow import Flow
from plaita.entrypoints import cli_console
from plaita.entrypoints.console import create_app
from plaita.entrypoints.console.auth import TokenTable
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from ..unit.application.conftest import one_task
from .conftest import TOKENS as SUITE_TOKENS
from .conftest import flow_catalogues, running_services, wait_for

TOKENS = {
    (role, scope): {
        "token": f"{role}-{scope.strip('*') or 'all'}-secret-0123456789",
        "name": f"{role}@{scope}",
        "role": role,
        "tenants": [scope],
    }
    for role in ("viewer", "operator", "admin")
    for scope in ("*", "acme")
}
SHARED = "deployment-wide"
EMPTY: dict[str, list[tuple[str, str, str]]] = {
    SHARED: [],
    "tenant 'default'": [],
    "tenant 'acme'": [],
}


def auth(role: str, scope: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[(role, scope)]['token']}"}


def pay(says: str, version: str = "1") -> dict[str, Any]:
    return {
        "flow_id": "pay",
        "version": version,
        "start": "done",
        "nodes": [{"id": "done", "type": "end", "output": repr(says)}],
    }


def fingerprint(document: dict[str, Any]) -> str:
    return Flow.from_document(document).fingerprint


@pytest.fixture
def app(container: Container) -> FastAPI:
    # The suite's tokens too: ``wait_for`` polls with its viewer.
    return create_app(container, tokens=[*SUITE_TOKENS.values(), *TOKENS.values()])


async def register(
    client: httpx.AsyncClient, document: dict[str, Any], who: tuple[str, str], **owner: Any
) -> httpx.Response:
    return await client.post("/api/v1/flows", json={**document, **owner}, headers=auth(*who))


# --- who may register where (C3) -------------------------------------------------------------

TARGETS = {
    "tenant acme": ({"tenant": "acme"}, "tenant 'acme'"),
    "tenant default": ({"tenant": "default"}, "tenant 'default'"),
    "shared": ({"shared": True}, SHARED),
}
MATRIX = [
    # role, token scope, target, status, error
    *[
        (role, scope, target, 403, "RoleNotAllowedError")
        for role in ("viewer", "operator")
        for scope in ("*", "acme")
        for target in TARGETS
    ],
    ("admin", "*", "tenant acme", 201, None),
    ("admin", "*", "tenant default", 201, None),
    ("admin", "*", "shared", 201, None),
    ("admin", "acme", "tenant acme", 201, None),  # its own tenant
    ("admin", "acme", "tenant default", 403, "TenantNotAllowedError"),  # another tenant
    ("admin", "acme", "shared", 403, "SharedFlowNotAllowedError"),  # every tenant's
]


@pytest.mark.parametrize(
    ("role", "scope", "target", "status", "error"),
    MATRIX,
    ids=[f"{r}@{s}->{t}" for r, s, t, _, _ in MATRIX],
)
async def test_who_may_register_a_flow_for_which_catalogue(
    client: httpx.AsyncClient,
    container: Container,
    role: str,
    scope: str,
    target: str,
    status: int,
    error: str | None,
) -> None:
    owner, catalogue = TARGETS[target]

    answer = await register(client, pay("mine"), (role, scope), **owner)

    assert answer.status_code == status, answer.text
    if error is not None:
        assert answer.json()["error"] == error
        assert await flow_catalogues(container) == EMPTY
        return
    expected = {**EMPTY, catalogue: [("pay", "1", fingerprint(pay("mine")))]}
    assert await flow_catalogues(container) == expected
    assert answer.json() == {
        "flow_id": "pay",
        "version": "1",
        "fingerprint": fingerprint(pay("mine")),
        "tenant_id": None if target == "shared" else owner["tenant"],
        "shared": target == "shared",
        "created": True,
        "latest_version": "1",
        "is_latest": True,
        "latest_reason": "already",
    }


async def test_a_scoped_admin_is_told_how_to_register_for_its_own_tenant(
    client: httpx.AsyncClient,
) -> None:
    answer = await register(client, pay("mine"), ("admin", "acme"), shared=True)

    message = answer.json()["message"]
    assert "'admin@acme' may act for tenants ['acme'] only" in message
    assert "every tenant ('*')" in message and '"tenant"' in message


async def test_without_a_tenant_a_request_registers_for_the_default_tenant(
    client: httpx.AsyncClient, container: Container
) -> None:
    """As every request: no tenant is the default tenant, never the whole deployment."""
    refused = await register(client, pay("mine"), ("admin", "acme"))
    assert refused.status_code == 403 and refused.json()["error"] == "TenantNotAllowedError"

    answer = await register(client, pay("mine"), ("admin", "*"))

    assert answer.status_code == 201 and answer.json()["tenant_id"] == "default"
    assert (await flow_catalogues(container))[SHARED] == []


async def test_shared_and_a_tenant_together_are_422(client: httpx.AsyncClient) -> None:
    answer = await register(client, pay("mine"), ("admin", "*"), shared=True, tenant="acme")

    assert answer.status_code == 422
    assert "either tenant" in answer.json()["message"]


# --- immutable versions (S2) -----------------------------------------------------------------


async def test_the_same_document_again_is_200_and_changes_nothing(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register(client, pay("one", version="1"), ("admin", "*"), shared=True)
    await register(client, pay("two", version="2"), ("admin", "*"), shared=True)
    before = await flow_catalogues(container)

    again = await register(client, pay("one", version="1"), ("admin", "*"), shared=True)

    assert again.status_code == 200, again.text
    assert again.json()["created"] is False
    assert again.json()["fingerprint"] == fingerprint(pay("one"))
    assert await flow_catalogues(container) == before  # the latest stays version 2


async def test_another_document_under_a_registered_version_is_409_with_both_fingerprints(
    client: httpx.AsyncClient, container: Container, caplog: pytest.LogCaptureFixture
) -> None:
    await register(client, pay("original"), ("admin", "*"), shared=True)
    before = await flow_catalogues(container)

    with caplog.at_level(logging.INFO, logger="plaita.audit"):
        answer = await register(client, pay("rogue"), ("admin", "*"), shared=True)

    assert answer.status_code == 409, answer.text
    body = answer.json()
    assert body["error"] == "FlowVersionConflictError"
    assert (body["flow_id"], body["version"]) == ("pay", "1")
    assert body["registered_fingerprint"] == fingerprint(pay("original"))
    assert body["given_fingerprint"] == fingerprint(pay("rogue"))
    assert "new version" in body["message"]
    assert await flow_catalogues(container) == before
    # Who tried is on the audit log.
    lines = [r.getMessage() for r in caplog.records if "console.flow_register" in r.getMessage()]
    assert lines[-1] == (
        f"event=console.flow_register by=admin@* owner=* flow_id=pay version=1 "
        f"fingerprint={fingerprint(pay('rogue'))} outcome=conflict latest=-"
    )


# --- which version is the latest (S2) ---------------------------------------------------------


async def test_an_older_version_does_not_become_latest_unless_latest_is_sent(
    client: httpx.AsyncClient, container: Container, caplog: pytest.LogCaptureFixture
) -> None:
    await register(client, pay("two", version="2"), ("admin", "*"), shared=True)

    older = await register(client, pay("one", version="1"), ("admin", "*"), shared=True)

    assert older.status_code == 201, older.text
    assert (older.json()["created"], older.json()["is_latest"]) == (True, False)
    assert (older.json()["latest_version"], older.json()["latest_reason"]) == ("2", "lower")
    two = ("pay", "2", fingerprint(pay("two", version="2")))
    assert (await flow_catalogues(container))[SHARED] == [two]

    with caplog.at_level(logging.INFO, logger="plaita.audit"):
        rollback = await register(
            client, pay("one", version="1"), ("admin", "*"), shared=True, latest=True
        )

    assert rollback.status_code == 200, rollback.text  # the version was there already
    assert rollback.json()["created"] is False
    assert (rollback.json()["is_latest"], rollback.json()["latest_reason"]) == (True, "chosen")
    assert (await flow_catalogues(container))[SHARED] == [("pay", "1", fingerprint(pay("one")))]
    # The rollback's audit line is the last (caplog keeps the test's earlier ones too).
    line = [r.getMessage() for r in caplog.records if "console.flow_register" in r.getMessage()][-1]
    assert line.endswith("outcome=unchanged latest=1")


async def test_a_higher_version_becomes_the_latest_by_the_version_order(
    client: httpx.AsyncClient,
) -> None:
    await register(client, pay("nine", version="1.9"), ("admin", "*"), tenant="acme")

    higher = await register(client, pay("ten", version="1.10"), ("admin", "*"), tenant="acme")

    assert higher.json()["latest_reason"] == "higher" and higher.json()["is_latest"] is True
    shown = await client.get(
        "/api/v1/flows/pay", params={"tenant": "acme"}, headers=auth("viewer", "acme")
    )
    assert shown.json()["version"] == "1.10"


async def test_a_flows_versions_are_listed_highest_first_with_the_latest(
    client: httpx.AsyncClient,
) -> None:
    """The console's flows page: every version of a flow, and which one runs by default."""
    for version in ("1.9", "1.10", "2"):
        await register(client, pay(version, version=version), ("admin", "*"), tenant="acme")
    await register(client, pay("old", version="1"), ("admin", "*"), tenant="acme", latest=True)
    await register(client, pay("shared"), ("admin", "*"), shared=True)

    listed = await client.get(
        "/api/v1/flows/pay/versions", params={"tenant": "acme"}, headers=auth("viewer", "acme")
    )

    assert listed.status_code == 200, listed.text
    assert listed.json() == {
        "flow_id": "pay",
        "tenant_id": "acme",
        "shared": False,
        "latest_version": "1",
        "versions": ["2", "1.10", "1.9", "1"],
    }
    default = await client.get("/api/v1/flows/pay/versions", headers=auth("viewer", "*"))
    assert (default.json()["shared"], default.json()["versions"]) == (True, ["1"])


async def test_the_versions_of_an_unknown_flow_are_a_named_404(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/flows/nope/versions", headers=auth("viewer", "*"))
    assert answer.status_code == 404
    assert answer.json()["error"] == "UnknownFlowError"


async def test_latest_must_be_a_boolean_and_is_not_part_of_the_document(
    client: httpx.AsyncClient, container: Container
) -> None:
    refused = await register(client, pay("one"), ("admin", "*"), shared=True, latest="yes")
    assert refused.status_code == 422
    assert (await flow_catalogues(container))[SHARED] == []

    chosen = await register(client, pay("one"), ("admin", "*"), shared=True, latest=True)
    plain = await register(client, pay("one"), ("admin", "*"), shared=True)

    assert chosen.json()["fingerprint"] == fingerprint(pay("one"))
    assert plain.status_code == 200 and plain.json()["created"] is False


# --- what a tenant sees and runs (W24) -------------------------------------------------------


async def test_a_tenant_lists_its_own_flows_over_the_shared_ones_and_sees_whose(
    client: httpx.AsyncClient,
) -> None:
    await register(client, pay("original"), ("admin", "*"), shared=True)
    await register(client, {**pay("x"), "flow_id": "common"}, ("admin", "*"), shared=True)
    await register(client, pay("acme"), ("admin", "acme"), tenant="acme")
    await register(client, {**pay("y"), "flow_id": "theirs"}, ("admin", "*"), tenant="default")

    acme = await client.get(
        "/api/v1/flows", params={"tenant": "acme"}, headers=auth("viewer", "acme")
    )
    shared = await client.get(
        "/api/v1/flows", params={"tenant": "acme", "shared": "true"}, headers=auth("viewer", "acme")
    )
    shown = await client.get(
        "/api/v1/flows/pay", params={"tenant": "acme"}, headers=auth("viewer", "acme")
    )
    shown_shared = await client.get(
        "/api/v1/flows/pay",
        params={"tenant": "acme", "shared": "true"},
        headers=auth("viewer", "acme"),
    )

    assert [(i["flow_id"], i["tenant_id"], i["shared"]) for i in acme.json()["items"]] == [
        ("common", None, True),
        ("pay", "acme", False),
    ]
    assert [(i["flow_id"], i["shared"]) for i in shared.json()["items"]] == [
        ("common", True),
        ("pay", True),
    ]
    assert (shown.json()["tenant_id"], shown.json()["fingerprint"]) == (
        "acme",
        fingerprint(pay("acme")),
    )
    assert shown_shared.json()["fingerprint"] == fingerprint(pay("original"))


async def test_another_tenants_flow_is_not_there_for_the_viewer_of_a_tenant(
    client: httpx.AsyncClient,
) -> None:
    await register(client, pay("default only"), ("admin", "*"), tenant="default")

    answer = await client.get(
        "/api/v1/flows/pay", params={"tenant": "acme"}, headers=auth("viewer", "acme")
    )

    assert answer.status_code == 404 and answer.json()["error"] == "UnknownFlowError"


async def test_each_tenant_runs_its_own_definition_and_the_others_the_shared_one(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register(client, pay("original"), ("admin", "*"), shared=True)
    copy = await register(client, pay("acme"), ("admin", "acme"), tenant="acme")
    assert copy.status_code == 201

    async with running_services(container):
        started = {}
        for tenant, scope in (("default", "*"), ("acme", "acme"), ("globex", "*")):
            answer = await client.post(
                "/api/v1/executions",
                json={"flow_id": "pay", "tenant": tenant},
                headers=auth("operator", scope),
            )
            assert answer.status_code == 201, answer.text
            started[tenant] = answer.json()["execution_id"]
        results = {
            tenant: (await wait_for(client, execution_id, {"completed"}, tenant=tenant))["result"]
            for tenant, execution_id in started.items()
        }

    assert results == {"default": "original", "acme": "acme", "globex": "original"}


# --- the console never imports handler code --------------------------------------------------


async def test_plaita_console_registers_by_module_name_and_never_imports_handler_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plaita console`` chooses the names-only check: a flow of an allowlisted module is
    registered without importing it — not even with a misspelt function, which a worker
    (``HandlerRegistry``) refuses at registration and a node meets at run time."""
    module = "plaita_console_import_trap"
    trace = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(
        f"import pathlib\npathlib.Path({str(trace)!r}).write_text('imported')\n"
        "def always_busy(params, ctx):\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    served: list[tuple[Settings, TokenTable]] = []

    async def serve(settings: Settings, tokens: TokenTable, host: str, port: int) -> None:
        served.append((settings, tokens))

    monkeypatch.setattr(cli_console, "_serve", serve)
    token = TOKENS[("admin", "*")]
    result = await asyncio.to_thread(
        CliRunner().invoke,
        cli_console.console,
        ["--redis-url", "redis://127.0.0.1:1/0", "--handler-modules", module],
        env={"PLAITA_CONSOLE_TOKENS": json.dumps([token])},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    [(settings, tokens)] = served
    assert settings.handler_check == "names"

    container = build_container(settings)
    container.redis_client.override(providers.Object(fakeredis.FakeAsyncRedis()))
    app = cli_console.console_app(container, settings, tokens)
    document = one_task(f"{module}:alwys_busy")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        answer = await register(client, document, ("admin", "*"), shared=True)
        outside = await register(client, one_task("other_module:run", "evil"), ("admin", "*"))

    assert answer.status_code == 201, answer.text
    assert not trace.exists() and module not in sys.modules
    # The names are still compared: a module outside the allowlist is refused.
    assert outside.status_code == 422 and outside.json()["error"] == "HandlerNotAllowedError"
