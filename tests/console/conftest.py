"""The console under test: a container on the memory twin, the app, an HTTP client, tokens.

API requests open their tenant's scope themselves (W24), so these tests run outside any
scope: a route that forgot ``tenant_scope`` fails closed here instead of quietly reading the
default tenant's data. Tests that read the stores directly open the scope they mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from plaita.application.tenancy import no_tenant_scope, tenant_scope
from plaita.domain.events import EventQuery
from plaita.domain.flow_owners import SHARED, FlowOwner
from plaita.entrypoints.cli_support import import_handler_modules
from plaita.entrypoints.console import create_app
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.event_filter import EventFilterService
from plaita.entrypoints.settings import Settings
from plaita.entrypoints.worker import Worker

REPO_ROOT = Path(__file__).resolve().parents[2]
APPROVAL_FLOW = REPO_ROOT / "examples" / "flows" / "approval.json"
HANDLERS = "examples.handlers"
TERMINAL = {"completed", "error", "cancelled"}

TOKENS: dict[str, dict[str, Any]] = {
    "admin": {
        "token": "admin-secret-0123456789",
        "name": "root",
        "role": "admin",
        "tenants": ["*"],
    },
    "operator": {
        "token": "operator-secret-0123456789",
        "name": "ops",
        "role": "operator",
        "tenants": ["*"],
    },
    "viewer": {
        "token": "viewer-secret-0123456789",
        "name": "watcher",
        "role": "viewer",
        "tenants": ["*"],
    },
    "acme": {
        "token": "acme-admin-secret-0123456789",
        "name": "acme-root",
        "role": "admin",
        "tenants": ["acme"],
    },
}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]['token']}"}


def approval_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(APPROVAL_FLOW.read_text())
    return document


@pytest.fixture(autouse=True)
def default_tenant_scope() -> Iterator[None]:
    """Replaces the suite-wide default scope: the console must open its own."""
    with no_tenant_scope():
        yield


def memory_settings(**values: Any) -> Settings:
    return Settings(
        backend="memory",
        handler_modules=(HANDLERS,),
        read_block_ms=20,
        consumer_name="console-tests",
        **values,
    )


@pytest.fixture
def container() -> Container:
    import_handler_modules((HANDLERS,))
    return build_container(memory_settings())


@pytest.fixture
def app(container: Container) -> FastAPI:
    return create_app(container, tokens=list(TOKENS.values()))


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        yield http


@contextlib.asynccontextmanager
async def running_services(container: Container) -> AsyncIterator[None]:
    """The production worker loop and event filter on the container, in this event loop."""
    stop = asyncio.Event()
    worker = Worker(
        queue=container.queue(),
        process=container.process_task(),
        delay=container.delay_queue(),
        clock=container.clock(),
        consumer="console-test-worker",
        concurrency=4,
        read_block_ms=20,
    )
    event_filter = EventFilterService(
        events=container.events(),
        filter_event=container.filter_event(),
        consumer="console-test-filter",
        read_block_ms=20,
    )
    tasks = [asyncio.create_task(worker.run(stop)), asyncio.create_task(event_filter.run(stop))]
    try:
        yield
    finally:
        stop.set()
        for task in tasks:
            await asyncio.wait_for(task, timeout=10)


@pytest.fixture
async def services(container: Container) -> AsyncIterator[None]:
    async with running_services(container):
        yield


async def register_approval(client: httpx.AsyncClient) -> None:
    """The approval flow, deployment-wide: every tenant's executions can run it."""
    answer = await client.post(
        "/api/v1/flows", json={**approval_document(), "shared": True}, headers=auth("admin")
    )
    assert answer.status_code == 201, answer.text


async def start(
    client: httpx.AsyncClient, amount: int, *, tenant: str = "default", who: str = "operator"
) -> str:
    answer = await client.post(
        "/api/v1/executions",
        json={"flow_id": "approval", "input": {"amount": amount}, "tenant": tenant},
        headers=auth(who),
    )
    assert answer.status_code == 201, answer.text
    execution_id: str = answer.json()["execution_id"]
    return execution_id


async def wait_for(
    client: httpx.AsyncClient,
    execution_id: str,
    statuses: Sequence[str] | set[str],
    *,
    tenant: str = "default",
    timeout: float = 10.0,
) -> dict[str, Any]:
    """The execution's detail once its status is one of ``statuses`` (polled through the API)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        answer = await client.get(
            f"/api/v1/executions/{execution_id}",
            params={"tenant": tenant},
            headers=auth("viewer"),
        )
        if answer.status_code == 200:
            last = answer.json()
            if last["status"] in statuses:
                detail: dict[str, Any] = last
                return detail
        await asyncio.sleep(0.02)
    raise AssertionError(f"execution {execution_id} never reached {set(statuses)}; last {last}")


async def flow_catalogues(container: Container) -> dict[str, list[tuple[str, str, str]]]:
    """Every definition of the deployment-wide, default and acme catalogues, by owner:
    (flow_id, version, fingerprint) of each one's latest."""
    repository = container.flow_repository()
    found: dict[str, list[tuple[str, str, str]]] = {}
    for owner in (SHARED, FlowOwner.tenant("default"), FlowOwner.tenant("acme")):
        latest = [
            await repository.get(i, owner=owner) for i in await repository.list_ids(owner=owner)
        ]
        found[str(owner)] = [(f.flow_id, f.version, f.fingerprint) for f in latest if f is not None]
    return found


async def snapshot(container: Container) -> dict[str, Any]:
    """What a refused request must not change: queue, flows, events, executions, flags,
    tenants' status records."""
    executions: dict[str, Any] = {}
    for tenant in ("default", "acme"):
        with tenant_scope(tenant):
            page = await container.executions().page(limit=500)
            flags = await container.controls().get_many([s.execution_id for s in page.items])
        executions[tenant] = (
            [s.to_json() for s in page.items],
            {k: v.to_json() for k, v in flags.items()},
        )
    return {
        "queue": await container.queue().stats(),
        "delayed": await container.delay_queue().pending(),
        "flows": await flow_catalogues(container),
        "events": len(await container.events().list(EventQuery(limit=10_000))),
        "dead_letters": await container.queue().dead_letter_length(),
        "executions": executions,
        "tenants": [r.to_json() for r in await container.tenants().list()],
    }
