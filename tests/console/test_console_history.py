"""GET /api/v1/executions/{id}/history: what happened to an execution, written by the
production worker on the memory twin and read through the API."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from plaita.domain.failures import TransientNodeError
from plaita.entrypoints.cli_support import import_handler_modules
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from .conftest import HANDLERS, TERMINAL, auth, register_approval, start, wait_for

#: The examples' handlers and this module's own (``fails_twice``).
MODULES = (HANDLERS, __name__)

pytestmark = pytest.mark.usefixtures("services")

#: execution id -> attempts ``fails_twice`` has seen.
SEEN: dict[str, int] = {}


#: The container the worker under test runs on, for ``taken_over`` to reach its leases.
CURRENT: dict[str, Container] = {}


@pytest.fixture
def container() -> Container:
    import_handler_modules(MODULES)
    built = build_container(
        Settings(
            backend="memory",
            handler_modules=MODULES,
            read_block_ms=20,
            consumer_name="console-tests",
        )
    )
    CURRENT["container"] = built
    return built


async def taken_over(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """While the node runs, another holder takes the execution's lease (once): the worker's
    checkpoint is refused, and it stops advancing the execution."""
    from plaita.application.tenancy import tenant_scope

    if ctx.execution_id not in SEEN:
        SEEN[ctx.execution_id] = 1
        leases = CURRENT["container"].leases()
        with tenant_scope("default"):
            held = await leases.holder(ctx.execution_id)
            assert held is not None
            await leases.release(held)
            assert await leases.acquire(ctx.execution_id, "intruder", ttl_ms=60_000)
    return {"ok": True}


TAKEN_OVER_FLOW = {
    "flow_id": "taken_over",
    "version": "1",
    "start": "call",
    "nodes": [
        {"id": "call", "type": "task", "handler": f"{__name__}:taken_over", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


def fails_twice(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Fail transiently on the first two attempts, then succeed."""
    SEEN[ctx.execution_id] = SEEN.get(ctx.execution_id, 0) + 1
    if SEEN[ctx.execution_id] <= 2:
        raise TransientNodeError(f"upstream busy on attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


FLAKY_FLOW = {
    "flow_id": "flaky",
    "version": "1",
    "start": "call",
    "nodes": [
        {
            "id": "call",
            "type": "task",
            "handler": f"{__name__}:fails_twice",
            "retryTimes": 2,
            "next": "done",
        },
        {"id": "done", "type": "end", "output": "$LAST_NODE"},
    ],
}

TIMER_FLOW = {
    "flow_id": "nap",
    "version": "1",
    "start": "nap",
    "nodes": [
        {"id": "nap", "type": "sleep", "duration": "PT0.1S", "next": "done"},
        {"id": "done", "type": "end", "output": "'rested'"},
    ],
}


async def history(client: httpx.AsyncClient, execution_id: str, **params: Any) -> dict[str, Any]:
    answer = await client.get(
        f"/api/v1/executions/{execution_id}/history", params=params, headers=auth("viewer")
    )
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def kinds(page: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(entry["kind"], entry["node_id"]) for entry in page["entries"]]


async def register(client: httpx.AsyncClient, document: dict[str, Any]) -> None:
    answer = await client.post(
        "/api/v1/flows", json={**document, "shared": True}, headers=auth("admin")
    )
    assert answer.status_code == 201, answer.text


async def start_flow(client: httpx.AsyncClient, flow_id: str) -> str:
    answer = await client.post(
        "/api/v1/executions", json={"flow_id": flow_id, "input": {}}, headers=auth("operator")
    )
    assert answer.status_code == 201, answer.text
    execution_id: str = answer.json()["execution_id"]
    return execution_id


async def test_a_transient_failure_retried_twice_then_success(client: httpx.AsyncClient) -> None:
    await register(client, FLAKY_FLOW)
    execution_id = await start_flow(client, "flaky")

    done = await wait_for(client, execution_id, TERMINAL, timeout=15.0)
    assert done["status"] == "completed"

    page = await history(client, execution_id)
    assert kinds(page) == [
        ("accepted", None),
        ("started", None),
        ("node_started", "call"),
        ("node_failed", "call"),
        ("retry_scheduled", "call"),
        ("node_started", "call"),
        ("node_failed", "call"),
        ("retry_scheduled", "call"),
        ("node_started", "call"),
        ("node_finished", "call"),
        ("node_started", "done"),
        ("node_finished", "done"),
        ("ended", None),
    ]
    entries = page["entries"]
    assert [entry["seq"] for entry in entries] == list(range(1, 14))
    assert entries[0]["detail"] == {"input_bytes": 2, "via": "api", "by": "token ops"}
    assert [e["attempt"] for e in entries if e["kind"] == "node_started"][:3] == [1, 2, 3]
    failures = [entry for entry in entries if entry["kind"] == "node_failed"]
    for attempt, failure in enumerate(failures, start=1):
        assert failure["attempt"] == attempt
        assert failure["detail"]["error_class"] == "TransientNodeError"
        assert failure["detail"]["failure"] == "transient"
        traceback = failure["detail"]["traceback"]
        assert "in fails_twice" in traceback and "TransientNodeError" in traceback
    retry = entries[4]
    assert retry["detail"]["next_attempt"] == 2 and retry["detail"]["due_ms"] >= retry["at_ms"]
    assert entries[-1]["detail"] == {"status": "completed"}
    assert (page["next_cursor"], page["dropped"]) == (None, 0)

    first = await history(client, execution_id, limit=5)
    assert [entry["seq"] for entry in first["entries"]] == [1, 2, 3, 4, 5]
    rest = await history(client, execution_id, after=first["next_cursor"])
    assert rest["entries"][0]["seq"] == 6 and rest["next_cursor"] is None
    shown = (await client.get(f"/api/v1/executions/{execution_id}", headers=auth("viewer"))).json()
    assert shown["last_failure"] is None  # the node that failed twice succeeded


async def test_a_deterministic_failure(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    execution_id = await start(client, -5)

    await wait_for(client, execution_id, TERMINAL)

    page = await history(client, execution_id)
    assert kinds(page) == [
        ("accepted", None),
        ("started", None),
        ("node_started", "request"),
        ("node_failed", "request"),
        ("ended", "request"),
    ]
    failed = page["entries"][3]["detail"]
    assert failed["error_class"] == "ValueError" and failed["failure"] == "deterministic"
    assert "amount must be a non-negative number" in failed["message"]
    assert "in create_request" in failed["traceback"]
    assert page["entries"][4]["detail"]["status"] == "error"
    shown = (await client.get(f"/api/v1/executions/{execution_id}", headers=auth("viewer"))).json()
    failure = shown["last_failure"]
    assert (failure["node_id"], failure["attempt"], failure["error_class"]) == (
        "request",
        1,
        "ValueError",
    )
    assert failure["transient"] is False and failure["retry_at_ms"] is None


async def test_suspend_event_resume(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})
    published = await client.post(
        "/api/v1/events",
        json={
            "event_type": "approval_decision",
            "correlation_id": execution_id,
            "data": {"approved": True, "by": "history test"},
        },
        headers=auth("operator"),
    )
    assert published.status_code == 201, published.text
    await wait_for(client, execution_id, TERMINAL)

    page = await history(client, execution_id)
    found = kinds(page)
    suspended = found.index(("suspended", "wait_decision"))
    assert found[suspended + 1] == ("event_received", "wait_decision")
    entries = page["entries"]
    assert entries[suspended]["detail"] == {"event_type": "approval_decision"}
    received = entries[suspended + 1]["detail"]
    assert received["event_id"] == published.json()["event_id"]
    assert received["event_type"] == "approval_decision"
    assert received["via"] == "filter"  # routed by the event filter when it was published
    assert found[-1] == ("ended", None)


async def test_a_timer(client: httpx.AsyncClient) -> None:
    await register(client, TIMER_FLOW)
    execution_id = await start_flow(client, "nap")

    await wait_for(client, execution_id, TERMINAL)

    page = await history(client, execution_id)
    found = kinds(page)
    suspended = found.index(("suspended", "nap"))
    assert "timer_due_ms" in page["entries"][suspended]["detail"]
    assert found[suspended + 1] == ("timer_fired", "nap")
    assert found[-1] == ("ended", None)


async def test_an_operator_cancel(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})

    answer = await client.post(
        f"/api/v1/executions/{execution_id}/cancel", json={}, headers=auth("operator")
    )
    assert answer.status_code == 202, answer.text
    await wait_for(client, execution_id, {"cancelled"})

    page = await history(client, execution_id)
    assert kinds(page)[-2:] == [("operator_action", None), ("ended", "wait_decision")]
    assert page["entries"][-2]["detail"] == {
        "who": "token ops (api)",
        "action": "cancel",
        "outcome": "cancel_requested",
    }
    assert page["entries"][-1]["detail"]["status"] == "cancelled"


async def test_a_lease_taken_over_mid_step(client: httpx.AsyncClient) -> None:
    """The worker whose checkpoint is refused for a newer holder says so in the history,
    and its step's entries are not there: nothing of the refused write landed."""
    await register(client, TAKEN_OVER_FLOW)
    execution_id = await start_flow(client, "taken_over")

    page: dict[str, Any] = {}
    for _ in range(200):  # bounded: 200 polls of 25 ms
        page = await history(client, execution_id)
        if any(entry["kind"] in ("fenced", "lease_lost") for entry in page["entries"]):
            break
        await asyncio.sleep(0.025)
    found = kinds(page)
    assert found[:2] == [("accepted", None), ("started", None)], found
    [lost] = [entry for entry in page["entries"] if entry["kind"] in ("fenced", "lease_lost")]
    assert lost["worker"]  # the holder that lost it
    assert lost["detail"]["generation"] >= 1
    assert ("node_finished", "call") not in found  # the refused checkpoint wrote nothing


async def test_the_history_is_bounded_and_counts_what_it_dropped(
    client: httpx.AsyncClient, container: Container
) -> None:
    """Past the cap the oldest entries go; the API says how many (``dropped``) and the
    sequence numbers go on."""
    from plaita.application.tenancy import tenant_scope
    from plaita.domain import history as entries
    from plaita.domain.history import HISTORY_CAP

    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})
    before = (await history(client, execution_id, limit=500))["entries"]
    notes = [entries.operator_action(n, who="test", action="note") for n in range(HISTORY_CAP + 5)]
    with tenant_scope("default"):
        await container.executions().append_history(execution_id, notes)

    first = await history(client, execution_id, limit=10)
    total = len(before) + HISTORY_CAP + 5
    assert first["dropped"] == total - HISTORY_CAP
    assert first["entries"][0]["seq"] == total - HISTORY_CAP + 1
    shown = await client.get(f"/api/v1/executions/{execution_id}", headers=auth("viewer"))
    assert shown.status_code == 200


async def test_an_unknown_execution_is_404_and_a_bad_page_422(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/executions/nobody/history", headers=auth("viewer"))
    assert answer.status_code == 404
    for params in ({"limit": 0}, {"limit": 501}, {"after": -1}):
        answer = await client.get(
            "/api/v1/executions/nobody/history", params=params, headers=auth("viewer")
        )
        assert answer.status_code == 422, params


async def test_without_a_token_it_is_401(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/executions/x/history")
    assert answer.status_code == 401
