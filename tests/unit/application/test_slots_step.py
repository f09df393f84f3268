"""The dispatch's slots on the memory twin (E1a concurrency per key; W2, W8, I0).

A flow limited to one running execution per customer: a second execution's carrier waits in
the key's FIFO and runs when the first suspends or ends; a retry keeps the slot; a cancel
never waits; waiting burns no attempt; a key that fails on the input fails the execution;
a dead holder's slot is handed on by the sweep.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.slot_sweep import SweepSlots
from plaita.application.use_cases.step import Disposition
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_control import WaitReason
from plaita.domain.flow_owners import SHARED
from plaita.domain.slots import SlotTableId
from plaita.domain.tenant_status import TenantRecord, TenantStatus

from .conftest import handler_registry
from .twin import Twin

LIMITED = {
    "flow_id": "limited",
    "start": "work",
    "concurrency": {"key": "${customer}", "limit": 1},
    "nodes": [
        {"id": "work", "type": "task", "handler": "t:request", "next": "wait"},
        {"id": "wait", "type": "event", "event_type": "go", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}
ACME = SlotTableId.concurrency("limited", "acme")


def start(twin: Twin, execution_id: str, customer: object = "acme") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="limited",
        version="1",
        params={"customer": customer},
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )


@pytest.fixture
async def limited(twin: Twin) -> Twin:
    await twin.catalog.register(Flow.from_document(LIMITED), owner=SHARED)
    return twin


def failing_first(calls: dict[str, int]) -> Any:
    """A handler whose first call per execution fails with a transient error (a retry)."""

    def handler(params: Any, ctx: Any) -> Any:
        calls[ctx.execution_id] = calls.get(ctx.execution_id, 0) + 1
        if calls[ctx.execution_id] == 1:
            raise ConnectionError("not yet")
        return {"ok": True}

    return handler


async def holders(twin: Twin) -> list[str]:
    with tenant_scope("default"):
        return sorted((await twin.slots.read(ACME)).table.holders)


async def test_a_second_execution_waits_and_runs_when_the_first_suspends(
    limited: Twin,
) -> None:
    twin = limited
    calls: dict[str, int] = {}
    twin.handlers = handler_registry(request=failing_first(calls))
    first = await twin.process(start(twin, "x-1"))
    assert first.outcome == "retry_scheduled"  # the retry keeps its slot
    assert await holders(twin) == ["x-1"]

    second = await twin.process(start(twin, "x-2"))
    assert (second.disposition, second.outcome) == (Disposition.ACK, "concurrency_wait")
    assert await twin.executions.load("x-2") is None  # nothing ran: no attempt was counted
    assert calls == {"x-1": 1}

    assert second.waited is WaitReason.CONCURRENCY  # counted by reason
    with tenant_scope("default"):
        note = await twin.waiting.get("x-2")
    assert note is not None
    assert (note.reason, note.key, note.holders, note.limit) == (
        WaitReason.CONCURRENCY,
        "acme",
        ("x-1",),
        1,
    )

    (retry, _due) = first.schedule[0]
    resumed = await twin.process(retry)
    assert resumed.outcome == "suspended"  # at its event: it holds no slot any more
    outcomes = await twin.drain_queue()  # the promoted carrier of x-2
    assert [o.outcome for o in outcomes] == ["retry_scheduled"]
    assert await holders(twin) == ["x-2"]
    assert calls == {"x-1": 2, "x-2": 1}  # x-2's first attempt is its first call
    with tenant_scope("default"):
        assert await twin.waiting.get("x-2") is None  # it runs: the note is gone


async def test_other_keys_do_not_wait(limited: Twin) -> None:
    twin = limited
    twin.handlers = handler_registry(request=failing_first({}))
    assert (await twin.process(start(twin, "x-1"))).outcome == "retry_scheduled"
    assert (await twin.process(start(twin, "x-2", customer="globex"))).outcome == (
        "retry_scheduled"
    )


async def test_an_end_releases_the_slot_to_the_next_in_fifo_order(limited: Twin) -> None:
    twin = limited
    calls: dict[str, int] = {}
    twin.handlers = handler_registry(request=failing_first(calls))
    first = await twin.process(start(twin, "x-1"))
    for execution_id in ("x-2", "x-3"):
        assert (await twin.process(start(twin, execution_id))).outcome == "concurrency_wait"
    await twin.process(first.schedule[0][0])
    await twin.drain_queue()
    assert await holders(twin) == ["x-2"]  # x-2 came first; x-3 still waits
    with tenant_scope("default"):
        assert (await twin.slots.read(ACME)).table.waiting == 1


async def test_a_cancel_never_waits_for_a_slot(limited: Twin) -> None:
    twin = limited
    twin.handlers = handler_registry(request=lambda params, ctx: {"ok": True})
    assert (await twin.process(start(twin, "x-3"))).outcome == "suspended"
    twin.handlers = handler_registry(request=failing_first({}))
    assert (await twin.process(start(twin, "x-1"))).outcome == "retry_scheduled"
    cancel = TaskEnvelope.resume(
        execution_id="x-3",
        flow_id="limited",
        resume_type=ResumeType.CANCEL,
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )
    result = await twin.process(cancel)
    assert result.outcome != "concurrency_wait"
    state = await twin.executions.load("x-3")
    assert state is not None and state.status is ExecutionStatus.CANCELLED
    assert await holders(twin) == ["x-1"]  # it took no slot, and left x-1's alone


async def test_a_cancel_of_an_execution_holding_its_slot_releases_it(limited: Twin) -> None:
    twin = limited
    twin.handlers = handler_registry(request=failing_first({}))
    assert (await twin.process(start(twin, "x-1"))).outcome == "retry_scheduled"
    assert (await twin.process(start(twin, "x-2"))).outcome == "concurrency_wait"
    cancel = TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="limited",
        resume_type=ResumeType.CANCEL,
        now_ms=twin.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )
    await twin.process(cancel)
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.CANCELLED
    await twin.drain_queue()  # x-2, promoted by the cancel's release
    assert await holders(twin) == ["x-2"]


async def test_a_key_that_fails_on_the_input_fails_the_execution_with_a_named_error(
    twin: Twin,
) -> None:
    document = {**LIMITED, "concurrency": {"key": "${input['tenant']}", "limit": 1}}
    await twin.catalog.register(Flow.from_document(document), owner=SHARED)
    result = await twin.process(start(twin, "x-1"))
    assert (result.disposition, result.outcome) == (Disposition.ACK, "failed")
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert state.error is not None and state.error.kind == "ConcurrencyKeyError"
    assert "flow 'limited' concurrency key failed on execution x-1's input" in (state.error.message)
    assert twin.calls.log == []  # nothing ran unlimited


async def test_a_dead_holders_slot_is_handed_on_by_the_sweep(limited: Twin) -> None:
    twin = limited
    twin.handlers = handler_registry(request=failing_first({}))
    first = await twin.process(start(twin, "x-1"))
    assert (await twin.process(start(twin, "x-2"))).outcome == "concurrency_wait"
    # x-1's worker dies: its retry is never run, so nobody releases or renews the slot.
    sweep = SweepSlots(
        slots=twin.slots,
        waiting=twin.waiting,
        queue=twin.queue,
        clock=twin.clock,
        lease_ttl_ms=twin.settings.lease_ttl_ms,
    )
    assert await sweep() == 0  # not expired yet: held until its retry's due time + the TTL
    due_ms = first.schedule[0][1]
    twin.clock.advance((due_ms - twin.clock.now_ms() + twin.settings.lease_ttl_ms) / 1000)
    assert await sweep() == 1
    outcomes = await twin.drain_queue()
    assert [o.outcome for o in outcomes] == ["retry_scheduled"]
    assert await holders(twin) == ["x-2"]


async def test_the_watchdog_renews_the_slot_with_the_lease(limited: Twin) -> None:
    """A long node keeps its slot: each lease renewal moves the slot's expiry too, so only a
    worker that stopped renewing (a kill) loses it."""
    twin = limited
    expiries: list[int] = []

    async def long_request(params: Any, ctx: Any) -> Any:
        for _ in range(6):
            await asyncio.sleep(0)
            with tenant_scope("default"):
                held = (await twin.slots.read(ACME)).table.holders.get("x-1")
            assert held is not None
            expiries.append(held.expires_ms)
        raise ConnectionError("retry later")  # ends running: the slot is kept for the retry

    twin.sleep = twin.tick
    twin.handlers = handler_registry(request=long_request)
    started_ms = twin.clock.now_ms()
    result = await twin.process(start(twin, "x-1"))
    assert result.outcome == "retry_scheduled"
    assert expiries[0] == started_ms + twin.settings.lease_ttl_ms
    assert expiries[-1] > expiries[0]  # renewed while the node ran


async def test_a_tenant_quota_makes_the_next_execution_wait_whatever_its_flow(
    limited: Twin,
) -> None:
    """The tenant's ``max_running`` is a slot table of its own, taken before the flow's."""
    twin = limited
    record = TenantRecord("default", TenantStatus.ACTIVE, 1, None, updated_at_ms=1, version=1)
    assert await twin.tenants.write(record, expected_version=0)
    twin.handlers = handler_registry(request=failing_first({}))
    first = await twin.process(start(twin, "x-1"))
    assert first.outcome == "retry_scheduled"
    other_key = await twin.process(start(twin, "x-2", customer="globex"))
    assert (other_key.outcome, other_key.waited) == ("quota_wait", WaitReason.TENANT_QUOTA)
    with tenant_scope("default"):
        quota = (await twin.slots.read(SlotTableId.quota())).table
        note = await twin.waiting.get("x-2")
    assert (list(quota.holders), quota.waiting) == (["x-1"], 1)
    assert note is not None and note.reason is WaitReason.TENANT_QUOTA
    await twin.process(first.schedule[0][0])  # x-1 suspends: its quota slot frees
    assert [o.outcome for o in await twin.drain_queue()] == ["retry_scheduled"]
    with tenant_scope("default"):
        assert list((await twin.slots.read(SlotTableId.quota())).table.holders) == ["x-2"]
