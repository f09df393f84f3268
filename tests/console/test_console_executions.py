"""The console API's executions endpoints on the memory twin (C1, W23, W13).

The production worker loop and event filter run in the test's event loop where an execution
must move; every request goes through the ASGI app with a real token.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from plaita.application.tenancy import tenant_scope
from plaita.domain.flow_control import Waiting, WaitReason
from plaita.entrypoints.container import Container

from .conftest import TERMINAL, auth, register_approval, start, wait_for

pytestmark = pytest.mark.usefixtures("services")


async def test_start_suspend_publish_complete_through_the_api(
    client: httpx.AsyncClient,
) -> None:
    """C1: start → suspended at the approval wait → publish the decision → completed."""
    await register_approval(client)
    execution_id = await start(client, 5000)

    waiting = await wait_for(client, execution_id, {"suspended"})
    assert waiting["waiting_for"]["node_id"] == "wait_decision"
    assert waiting["next_node_id"] == "wait_decision"
    assert [(e["node_id"], e["status"]) for e in waiting["timeline"]] == [
        ("request", "completed"),
        ("check", "completed"),
        ("wait_decision", "waiting"),
    ]
    assert waiting["timeline"][-1]["ended_at_ms"] is None

    published = await client.post(
        "/api/v1/events",
        json={
            "event_type": "approval_decision",
            "correlation_id": execution_id,
            "data": {"approved": True, "by": "console test"},
        },
        headers=auth("operator"),
    )
    assert published.status_code == 201, published.text

    done = await wait_for(client, execution_id, TERMINAL)
    assert done["status"] == "completed"
    assert done["result"] == {"outcome": "shipped", "amount": 5000, "approved": True}
    assert done["waiting_for"] is None
    timeline = done["timeline"]
    assert [e["node_id"] for e in timeline] == [
        "request",
        "check",
        "wait_decision",
        "record_decision",
        "route",
        "ship",
        "done",
    ]
    assert all(e["status"] == "completed" and e["ended_at_ms"] is not None for e in timeline)
    wait = timeline[2]
    assert wait["ended_at_ms"] >= wait["started_at_ms"]
    assert done["node_results"]["record_decision"] == {"approved": True, "by": "console test"}


async def test_a_small_request_completes_without_waiting(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    execution_id = await start(client, 250)
    done = await wait_for(client, execution_id, TERMINAL)
    assert done["status"] == "completed"
    assert done["result"]["outcome"] == "shipped"
    assert "wait_decision" not in done["node_results"]


async def test_start_with_a_dedup_key_starts_once(client: httpx.AsyncClient) -> None:
    """W6 through the API: the second start answers the first execution's id."""
    await register_approval(client)
    body = {"flow_id": "approval", "input": {"amount": 5}, "dedup_key": "order-42"}
    first = await client.post("/api/v1/executions", json=body, headers=auth("operator"))
    second = await client.post("/api/v1/executions", json=body, headers=auth("operator"))
    assert first.status_code == second.status_code == 201
    assert first.json()["deduplicated"] is False
    assert second.json() == {**first.json(), "deduplicated": True}


async def test_start_with_a_chosen_id_and_version(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    answer = await client.post(
        "/api/v1/executions",
        json={"flow_id": "approval", "version": "1", "execution_id": "x-1", "input": {"amount": 1}},
        headers=auth("operator"),
    )
    assert answer.status_code == 201
    assert answer.json() == {
        "execution_id": "x-1",
        "flow_id": "approval",
        "version": "1",
        "deduplicated": False,
    }
    assert (await wait_for(client, "x-1", TERMINAL))["status"] == "completed"


async def test_start_of_an_unknown_flow_is_404(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/api/v1/executions", json={"flow_id": "nope"}, headers=auth("operator")
    )
    assert answer.status_code == 404
    assert answer.json()["error"] == "UnknownFlowError"
    assert "'nope'" in answer.json()["message"]


async def test_listing_filters_and_pages_with_a_cursor(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    waiting = [await start(client, 5000) for _ in range(3)]
    finished = await start(client, 10)
    for execution_id in waiting:
        await wait_for(client, execution_id, {"suspended"})
    await wait_for(client, finished, TERMINAL)

    suspended = await client.get(
        "/api/v1/executions", params={"status": "suspended"}, headers=auth("viewer")
    )
    assert suspended.status_code == 200
    assert {item["execution_id"] for item in suspended.json()["items"]} == set(waiting)
    assert suspended.json()["next_cursor"] is None

    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, "flow_id": "approval"} | ({"cursor": cursor} if cursor else {})
        page = await client.get("/api/v1/executions", params=params, headers=auth("viewer"))
        assert page.status_code == 200, page.text
        assert len(page.json()["items"]) <= 2
        seen += [item["execution_id"] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([*waiting, finished])
    item = page.json()["items"][-1] if page.json()["items"] else None
    if item is not None:
        assert set(item) >= {"paused", "cancel_requested", "tenant_id", "flow_version", "error"}

    other_flow = await client.get(
        "/api/v1/executions", params={"flow_id": "other"}, headers=auth("viewer")
    )
    assert other_flow.json() == {"items": [], "next_cursor": None}


async def test_a_bad_cursor_is_422(client: httpx.AsyncClient) -> None:
    answer = await client.get(
        "/api/v1/executions", params={"cursor": "not-a-cursor"}, headers=auth("viewer")
    )
    assert answer.status_code == 422
    assert answer.json()["error"] == "InvalidOperatorRequestError"


async def test_an_unknown_execution_is_404(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/executions/missing", headers=auth("viewer"))
    assert answer.status_code == 404
    assert answer.json()["error"] == "UnknownExecutionError"
    assert "'missing'" in answer.json()["message"]


async def test_resume_of_a_suspended_execution_is_refused_and_says_what_moves_it(
    client: httpx.AsyncClient,
) -> None:
    """A continue for a suspended execution did nothing yet answered continue_enqueued
    (issue 16): it is a 409 now, and the view says so before anyone presses the button."""
    await register_approval(client)
    execution_id = await start(client, 5000)
    waiting = await wait_for(client, execution_id, {"suspended"})
    assert waiting["actions"]["resume"]["available"] is False
    assert "publish the event" in waiting["actions"]["resume"]["reason"]
    assert waiting["actions"]["publish_event"] == {"available": True, "reason": ""}
    assert waiting["actions"]["retry_from_node"]["available"] is True
    answer = await client.post(
        f"/api/v1/executions/{execution_id}/resume", json={}, headers=auth("operator")
    )
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "OperatorActionRefusedError"
    assert waiting["actions"]["resume"]["reason"] in answer.json()["message"]
    still = await wait_for(client, execution_id, {"suspended"})
    assert still["waiting_for"]["node_id"] == "wait_decision"


async def test_a_completed_execution_offers_no_action_but_delete_and_says_why(
    client: httpx.AsyncClient,
) -> None:
    await register_approval(client)
    done = await wait_for(client, await start(client, 10), TERMINAL)
    actions = done["actions"]
    assert [name for name, found in actions.items() if found["available"]] == ["delete"]
    assert actions["publish_event"]["reason"].startswith("It has ended")
    assert actions["retry_from_node"]["reason"].startswith("It completed")


async def test_resume_of_a_completed_execution_is_409_and_changes_nothing(
    client: httpx.AsyncClient, container: Container
) -> None:
    await register_approval(client)
    execution_id = await start(client, 1)
    before = await wait_for(client, execution_id, TERMINAL)
    stream_before = (await container.queue().stats()).length
    answer = await client.post(
        f"/api/v1/executions/{execution_id}/resume", headers=auth("operator")
    )
    assert answer.status_code == 409
    assert answer.json()["error"] == "OperatorActionRefusedError"
    assert (await container.queue().stats()).length == stream_before
    after = await wait_for(client, execution_id, TERMINAL)
    assert after == before


async def test_pause_then_unpause_a_waiting_execution(client: httpx.AsyncClient) -> None:
    """W23: a paused execution shows paused; unpause clears it and gives its carriers back."""
    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})

    paused = await client.post(
        f"/api/v1/executions/{execution_id}/pause", json={}, headers=auth("operator")
    )
    assert paused.status_code == 202
    assert paused.json()["outcome"] == "paused"
    assert paused.json()["paused"] is True
    detail = await wait_for(client, execution_id, {"suspended"})
    assert detail["paused"] is True

    again = await client.post(f"/api/v1/executions/{execution_id}/pause", headers=auth("operator"))
    assert again.json()["outcome"] == "already_paused"

    # The decision arrives while paused: its carrier is parked, the execution does not move.
    await client.post(
        "/api/v1/events",
        json={"event_type": "approval_decision", "correlation_id": execution_id},
        headers=auth("operator"),
    )
    parked = await _wait_parked(client, execution_id)
    assert parked["status"] == "suspended"

    unpaused = await client.post(
        f"/api/v1/executions/{execution_id}/unpause", headers=auth("operator")
    )
    assert unpaused.status_code == 202
    assert unpaused.json()["outcome"] == "unpaused"
    assert unpaused.json()["requeued"] == 1
    done = await wait_for(client, execution_id, TERMINAL)
    assert done["status"] == "completed"
    assert done["paused"] is False


async def _wait_parked(client: httpx.AsyncClient, execution_id: str) -> dict[str, object]:
    for _ in range(500):
        detail = await wait_for(client, execution_id, {"suspended"})
        if detail["parked"]:
            return detail
        await asyncio.sleep(0.02)
    raise AssertionError(f"no carrier of {execution_id} was parked")


async def test_cancel_a_waiting_execution(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})
    answer = await client.post(
        f"/api/v1/executions/{execution_id}/cancel", json={}, headers=auth("operator")
    )
    assert answer.status_code == 202
    assert answer.json()["outcome"] == "cancel_requested"
    assert answer.json()["cancel_requested"] is True
    done = await wait_for(client, execution_id, TERMINAL)
    assert done["status"] == "cancelled"

    again = await client.post(f"/api/v1/executions/{execution_id}/cancel", headers=auth("operator"))
    assert again.status_code == 409
    assert again.json()["error"] == "OperatorActionRefusedError"


async def test_retry_a_cancelled_execution_from_a_chosen_node(client: httpx.AsyncClient) -> None:
    """W23: the same id runs again from the named node and completes."""
    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})
    await client.post(f"/api/v1/executions/{execution_id}/cancel", headers=auth("operator"))
    await wait_for(client, execution_id, {"cancelled"})

    retried = await client.post(
        f"/api/v1/executions/{execution_id}/retry",
        json={"from_node": "auto_approve"},
        headers=auth("operator"),
    )
    assert retried.status_code == 202, retried.text
    assert retried.json()["outcome"] == "restarted"
    assert retried.json()["node_id"] == "auto_approve"
    done = await wait_for(client, execution_id, {"completed", "error"})
    assert done["status"] == "completed"
    assert done["result"]["approved"] is True


async def test_retry_from_an_unknown_node_is_422(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})
    answer = await client.post(
        f"/api/v1/executions/{execution_id}/retry",
        json={"from_node": "no_such_node"},
        headers=auth("operator"),
    )
    assert answer.status_code == 422
    assert answer.json()["error"] == "UnknownNodeError"
    assert "no_such_node" in answer.json()["message"]
    assert (await wait_for(client, execution_id, {"suspended"}))["waiting_for"] is not None


async def test_retry_of_a_completed_execution_is_409(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    execution_id = await start(client, 1)
    await wait_for(client, execution_id, TERMINAL)
    answer = await client.post(f"/api/v1/executions/{execution_id}/retry", headers=auth("operator"))
    assert answer.status_code == 409
    assert "start a new execution" in answer.json()["message"]


async def test_bulk_dry_run_then_pause_matching_executions(client: httpx.AsyncClient) -> None:
    await register_approval(client)
    waiting = [await start(client, 5000) for _ in range(2)]
    finished = await start(client, 1)
    for execution_id in waiting:
        await wait_for(client, execution_id, {"suspended"})
    await wait_for(client, finished, TERMINAL)

    body = {"action": "pause", "status": "suspended", "flow_id": "approval"}
    dry = await client.post(
        "/api/v1/executions/bulk", json={**body, "dry_run": True}, headers=auth("operator")
    )
    assert dry.status_code == 200
    assert dry.json()["matched"] == 2
    assert dry.json()["done"] == 0
    assert sorted(dry.json()["execution_ids"]) == sorted(waiting)
    for execution_id in waiting:
        assert (await wait_for(client, execution_id, {"suspended"}))["paused"] is False

    done = await client.post("/api/v1/executions/bulk", json=body, headers=auth("operator"))
    assert done.json()["matched"] == done.json()["done"] == 2
    assert done.json()["failed"] == []
    assert done.json()["outcomes"] == {"paused": 2}
    for execution_id in waiting:
        assert (await wait_for(client, execution_id, {"suspended"}))["paused"] is True

    cancel_all = await client.post(
        "/api/v1/executions/bulk", json={"action": "cancel"}, headers=auth("operator")
    )
    # The completed one cannot be cancelled: listed as failed, the others go on.
    assert cancel_all.json()["matched"] == 3
    assert [f["execution_id"] for f in cancel_all.json()["failed"]] == [finished]
    assert "OperatorActionRefusedError" in cancel_all.json()["failed"][0]["error"]


async def test_delete_leaves_a_tombstone_and_a_second_delete_keeps_it(
    client: httpx.AsyncClient, container: Container
) -> None:
    """W13 through the API (admin): the state is gone, the tombstone names who deleted it."""
    await register_approval(client)
    execution_id = await start(client, 5000)
    await wait_for(client, execution_id, {"suspended"})

    deleted = await client.delete(
        f"/api/v1/executions/{execution_id}",
        params={"reason": "test cleanup"},
        headers=auth("admin"),
    )
    assert deleted.status_code == 200, deleted.text
    view = deleted.json()
    assert view["deleted_now"] is True
    assert view["tombstone"]["reason"] == "test cleanup (by root)"
    assert view["tombstone"]["tenant_id"] == "default"
    assert view["removed_subscription"] is not None

    gone = await client.get(f"/api/v1/executions/{execution_id}", headers=auth("viewer"))
    assert gone.status_code == 404
    with tenant_scope("default"):
        assert await container.executions().tombstone(execution_id) is not None

    again = await client.delete(f"/api/v1/executions/{execution_id}", headers=auth("admin"))
    assert again.status_code == 200
    assert again.json()["deleted_now"] is False
    assert again.json()["tombstone"]["deleted_at_ms"] == view["tombstone"]["deleted_at_ms"]


async def test_deleting_an_unknown_execution_is_404(client: httpx.AsyncClient) -> None:
    answer = await client.delete("/api/v1/executions/never-was", headers=auth("admin"))
    assert answer.status_code == 404
    assert answer.json()["error"] == "UnknownExecutionError"


async def test_the_detail_says_why_a_limit_holds_an_execution_back(
    client: httpx.AsyncClient, container: Container
) -> None:
    """What the worker noted when a limit kept the carrier is the detail's ``held_back``; an
    execution with no note, or one that ended, has none."""
    await register_approval(client)
    execution_id = await start(client, 5000)
    waiting = await wait_for(client, execution_id, {"suspended"})
    assert waiting["held_back"] is None
    note = Waiting(
        reason=WaitReason.CONCURRENCY,
        since_ms=1_760_000_000_000,
        detail="2 of 2 slots of key 'acme' are held.",
        key="approval:acme",
        holders=("x:1", "x:2"),
        limit=2,
    )
    with tenant_scope("default"):
        await container.waiting_notes().note(execution_id, note)

    shown = (await client.get(f"/api/v1/executions/{execution_id}", headers=auth("viewer"))).json()

    assert shown["held_back"] == {
        "reason": "concurrency",
        "detail": "2 of 2 slots of key 'acme' are held.",
        "since_ms": 1_760_000_000_000,
        "key": "approval:acme",
        "holders": ["x:1", "x:2"],
        "limit": 2,
        "due_ms": None,
    }
