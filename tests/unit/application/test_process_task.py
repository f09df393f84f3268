"""The worker step on the memory twin: start, suspend, resume, conflicts and failures (W1-W7)."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

from plaita.adapters.memory.dedup import MemoryDedupStore
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.application.leased_load import SequentialLeasedLoad
from plaita.application.ports import NodeHeartbeat
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.executions import ResumeExecution
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.step import Disposition, ProcessTask, StepSettings
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType
from plaita.domain.errors import (
    ExecutionLeaseError,
    HandlerNotAllowedError,
    UnknownExecutionError,
    UnknownFlowError,
)
from plaita.domain.execution import ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tombstone import Tombstone

from .conftest import handler_registry
from .twin import APPROVAL, Twin


async def test_small_amount_runs_to_completion_in_one_dispatch(twin: Twin) -> None:
    result = await twin.process(twin.envelope_start(10))
    assert (result.disposition, result.outcome) == (Disposition.ACK, "completed")
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.COMPLETED
    assert state.result == "shipped"
    assert twin.calls.log == ["request", "ship"]
    assert await twin.leases.holder("x-1") is None, "the lease is released after the dispatch"


async def test_event_node_suspends_with_a_registered_subscription(twin: Twin) -> None:
    result = await twin.process(twin.envelope_start(5000))
    assert result.outcome == "suspended"
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.SUSPENDED
    assert state.suspension is not None and state.suspension.node_id == "wait"
    subscription = await twin.subscriptions.get(state.suspension.subscription_id or "")
    assert subscription is not None
    assert (subscription.event_type, subscription.correlation_id) == ("approval_decision", "x-1")


async def test_published_decision_resumes_the_execution_down_the_right_branch(twin: Twin) -> None:
    await twin.process(twin.envelope_start(5000))
    publish = twin.publish_event
    event = await publish("approval_decision", data={"approved": False}, correlation_id="x-1")
    filter_event = twin.filter_event
    assert await filter_event(event.event_id) == 1
    [outcome] = await twin.drain_queue()
    assert outcome.outcome == "completed"
    state = await twin.executions.load("x-1")
    assert state is not None and state.result == "rejected"
    assert twin.calls.log == ["request", "reject"]
    assert await twin.subscriptions.find("approval_decision") == []


async def test_a_duplicate_event_carrier_is_ignored_after_the_first_resumed(twin: Twin) -> None:
    """V6: each suspension is resumed at most once."""
    await twin.process(twin.envelope_start(5000))
    state = await twin.executions.load("x-1")
    assert state is not None and state.suspension is not None
    sub = state.suspension.subscription_id
    event = {"event_type": "approval_decision", "data": {"approved": True}}
    first = await twin.process(twin.resume(ResumeType.EVENT, event=event, subscription_id=sub))
    second = await twin.process(twin.resume(ResumeType.EVENT, event=event, subscription_id=sub))
    assert (first.outcome, second.outcome) == ("completed", "terminal")
    assert twin.calls.log == ["request", "ship"]


async def test_event_for_another_subscription_is_a_protocol_error_and_changes_nothing(
    twin: Twin,
) -> None:
    await twin.process(twin.envelope_start(5000))
    before = await twin.executions.load("x-1")
    result = await twin.process(
        twin.resume(ResumeType.EVENT, event={"data": {}}, subscription_id="someone-else")
    )
    assert (result.disposition, result.outcome) == (Disposition.ACK, "not_this_suspension")
    assert await twin.executions.load("x-1") == before


async def test_continue_on_a_suspended_execution_is_already_suspended(twin: Twin) -> None:
    await twin.process(twin.envelope_start(5000))
    result = await twin.process(twin.resume(ResumeType.CONTINUE))
    assert result.outcome == "already_suspended"


async def test_redelivered_start_continues_from_the_checkpoint(twin: Twin) -> None:
    """W6: a start whose row exists never replays the first node."""
    await twin.process(twin.envelope_start(5000))
    again = await twin.process(twin.envelope_start(5000))
    assert again.outcome == "already_suspended"
    assert twin.calls.log == ["request"]


async def test_start_reusing_an_id_of_another_flow_is_dead_lettered(twin: Twin) -> None:
    await twin.process(twin.envelope_start(10))
    before = await twin.executions.load("x-1")
    clash = attrs.evolve(twin.envelope_start(10), flow_id="other")
    result = await twin.process(clash)
    assert (result.disposition, result.outcome) == (
        Disposition.DEAD_LETTER,
        "execution_id_conflict",
    )
    assert await twin.executions.load("x-1") == before


async def test_start_of_an_unknown_flow_is_dead_lettered_with_the_reason(twin: Twin) -> None:
    result = await twin.process(attrs.evolve(twin.envelope_start(10), flow_id="nope"))
    assert result.disposition is Disposition.DEAD_LETTER
    assert "flow 'nope' version '1' is not registered" in result.detail
    assert await twin.executions.load("x-1") is None


async def test_lease_held_by_another_worker_leaves_the_carrier_pending(twin: Twin) -> None:
    """W3/W5: never two advancers; the carrier stays for a later attempt."""
    await twin.leases.acquire("x-1", "worker-b", ttl_ms=60_000)
    result = await twin.process(twin.envelope_start(10))
    assert (result.disposition, result.outcome) == (Disposition.LEAVE_PENDING, "lease_conflict")
    assert "worker-b" in result.detail
    assert twin.calls.log == []


async def test_a_holder_whose_lease_was_taken_over_is_fenced_off(twin: Twin) -> None:
    """W4: the stale holder's save is rejected and its carrier is not acked."""

    async def slow_request(params: Any, ctx: Any) -> Any:
        twin.clock.advance(200)  # past the 120 s lease, and another worker takes over
        assert await twin.leases.acquire("x-1", "worker-b", ttl_ms=60_000) is not None
        return {"id": 1}

    twin.handlers = handler_registry(request=slow_request)
    result = await twin.process(twin.envelope_start(10))
    assert (result.disposition, result.outcome) == (Disposition.LEAVE_PENDING, "fenced")
    assert await twin.executions.load("x-1") is None
    holder = await twin.leases.holder("x-1")
    assert holder is not None and holder.holder_id == "worker-b", "the new holder keeps its lease"


async def test_a_handler_outside_the_allowlist_fails_the_execution_visibly(twin: Twin) -> None:
    """A flow registered without the allowlist check still never imports the module."""
    rogue = dict(APPROVAL, flow_id="rogue")
    rogue["nodes"] = [
        {"id": "request", "type": "task", "handler": "os:system", "next": "done"},
        {"id": "done", "type": "end"},
    ]
    await FlowCatalog(twin.flows, None, clock=twin.clock).register(
        Flow.from_document(rogue), owner=SHARED
    )
    result = await twin.process(attrs.evolve(twin.envelope_start(1), flow_id="rogue"))
    assert result.outcome == "failed"
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert state.error is not None and state.error.kind == HandlerNotAllowedError.__name__


async def test_a_failing_handler_ends_the_execution_in_error_with_the_node(twin: Twin) -> None:
    def broken(params: Any, ctx: Any) -> Any:
        raise ValueError("amount is negative")

    twin.handlers = handler_registry(request=broken)
    result = await twin.process(twin.envelope_start(-1))
    assert (result.disposition, result.outcome) == (Disposition.ACK, "failed")
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert state.error is not None
    assert state.error.node_id == "request" and "amount is negative" in state.error.message


async def test_cancel_of_a_suspended_execution_drops_its_subscription(twin: Twin) -> None:
    await twin.process(twin.envelope_start(5000))
    result = await twin.process(twin.resume(ResumeType.CANCEL))
    assert result.outcome == "cancelled"
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.CANCELLED
    assert await twin.subscriptions.find("approval_decision") == []


async def test_resume_of_an_unknown_execution_is_dead_lettered(twin: Twin) -> None:
    result = await twin.process(twin.resume(ResumeType.CONTINUE, execution_id="ghost"))
    assert result.disposition is Disposition.DEAD_LETTER


async def test_a_long_dispatch_hands_over_to_a_fresh_carrier_before_acking(twin: Twin) -> None:
    """I0: a dispatch that stops early enqueues its continuation first; no node runs twice."""
    twin.settings = StepSettings(
        holder_id="worker-a", max_steps_per_dispatch=1, generations=LEGACY_GENERATIONS
    )
    result = await twin.process(twin.envelope_start(10))
    assert result.outcome == "yielded"
    outcomes = []
    for _ in range(10):
        outcomes += [o.outcome for o in await twin.drain_queue()]
        if "completed" in outcomes:
            break
    assert outcomes == ["yielded", "yielded", "completed"]  # check, auto, then done
    assert twin.calls.log == ["request", "ship"]


async def test_start_execution_refuses_an_unknown_flow_with_a_named_error(twin: Twin) -> None:
    with pytest.raises(UnknownFlowError, match="approval"):
        await twin.start_execution("missing")


async def test_start_with_a_dedup_key_starts_once(twin: Twin) -> None:
    """W6: the second start with the same key returns the first execution's id."""
    start = twin.start_execution
    first = await start("approval", params={"amount": 1}, dedup_key="order-7")
    second = await start("approval", params={"amount": 1}, dedup_key="order-7")
    assert second.execution_id == first.execution_id and second.deduplicated
    assert (await twin.queue.stats()).length == 1


async def test_the_watchdog_renews_the_lease_every_third_of_its_ttl_or_2_s(twin: Twin) -> None:
    """W3, P6: a step keeps its lease while the holder is alive, renewed (and its carrier
    refreshed) every min(TTL/3, 2 s): 2 s for the default 120 s lease."""
    ticks: list[float] = []

    async def tick(seconds: float) -> None:
        ticks.append(seconds)
        twin.clock.advance(seconds)
        await asyncio.sleep(0)

    async def long_request(params: Any, ctx: Any) -> Any:
        for _ in range(80):  # eighty watchdog periods: 160 s of a 120 s lease
            await asyncio.sleep(0)
        holder = await twin.leases.holder("x-1")
        assert holder is not None and holder.holder_id == "worker-a"
        return {"id": 1}

    twin.sleep = tick
    twin.handlers = handler_registry(request=long_request)
    result = await twin.process(twin.envelope_start(5000))
    assert result.outcome == "suspended"
    assert ticks and set(ticks) == {2.0}


async def test_a_holder_that_cannot_renew_fences_itself_off(twin: Twin) -> None:
    """W3: the watchdog failed to renew, so the handler sees ctx.cancelled and nothing is
    written, even though no other worker has taken the lease (its fence is still current)."""
    seen: list[bool] = []

    async def tick(seconds: float) -> None:
        await asyncio.sleep(0)

    async def request(params: Any, ctx: Any) -> Any:
        twin.clock.advance(130)  # the lease expires before the watchdog's first renewal
        for _ in range(5):
            await asyncio.sleep(0)
        seen.append(ctx.cancelled)
        return {"id": 1}

    twin.sleep = tick
    twin.handlers = handler_registry(request=request)
    result = await twin.process(twin.envelope_start(5000))
    assert (result.disposition, result.outcome) == (Disposition.LEAVE_PENDING, "lease_lost")
    assert seen == [True]
    assert await twin.executions.load("x-1") is None


async def test_resume_execution_enqueues_a_carrier_for_an_existing_execution(twin: Twin) -> None:
    await twin.process(twin.envelope_start(5000))
    state = await ResumeExecution(
        executions=twin.executions,
        queue=twin.queue,
        clock=twin.clock,
        generations=LEGACY_GENERATIONS,
    )("x-1", ResumeType.CANCEL)
    assert state.status is ExecutionStatus.SUSPENDED
    [outcome] = await twin.drain_queue()
    assert outcome.outcome == "cancelled"


async def test_resume_execution_of_an_unknown_execution_is_a_named_error(twin: Twin) -> None:
    resume = ResumeExecution(
        executions=twin.executions,
        queue=twin.queue,
        clock=twin.clock,
        generations=LEGACY_GENERATIONS,
    )
    with pytest.raises(UnknownExecutionError, match="ghost"):
        await resume("ghost", ResumeType.CONTINUE)


class RenewFailsOnce:
    """Delegates to the real lease manager; the first renewal hits a store outage."""

    def __init__(self, inner: MemoryLeaseManager) -> None:
        self._inner = inner
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def renew(self, lease: Any, *, ttl_ms: int) -> bool:
        if not self.failed:
            self.failed = True
            raise ConnectionError("store unreachable")
        return await self._inner.renew(lease, ttl_ms=ttl_ms)


async def test_a_renewal_outage_shorter_than_the_ttl_keeps_the_step_going(twin: Twin) -> None:
    """W3: one failed renewal is retried; the holder fences itself only after a full TTL."""

    async def request(params: Any, ctx: Any) -> Any:
        for _ in range(6):
            await asyncio.sleep(0)
        assert not ctx.cancelled
        return {"id": 1}

    flaky = RenewFailsOnce(twin.leases)
    twin.leases = flaky  # type: ignore[assignment]
    twin.sleep = twin.tick
    twin.handlers = handler_registry(request=request)
    result = await twin.process(twin.envelope_start(5000))
    assert result.outcome == "suspended" and flaky.failed


async def test_a_transient_node_failure_is_retried_through_the_delay_queue(twin: Twin) -> None:
    """W8: persist, release, schedule a copy that keeps the source's age, then ack."""

    def flaky(params: Any, ctx: Any) -> Any:
        raise ConnectionError("database unavailable")

    twin.handlers = handler_registry(request=flaky)
    start = twin.envelope_start(10)
    result = await twin.process(start)
    assert (result.disposition, result.outcome) == (Disposition.ACK, "retry_scheduled")
    assert await twin.leases.holder("x-1") is None, "the lease is released before the copy"
    assert await twin.delay.pending() == 1
    [(copy, due)] = result.schedule
    assert copy.resume_type is ResumeType.CONTINUE and copy.timestamp_ms == start.timestamp_ms
    assert due == twin.clock.now_ms() + 1000
    counters = await twin.counters.read("x-1")
    assert counters.node_retries == {"request": 1} and counters.total_retries == 1


async def test_a_node_out_of_retry_budget_ends_in_error_and_the_dead_letter_queue(
    twin: Twin,
) -> None:
    """E15, W8: after the node's retries (here the deployment default, 2) the execution fails
    naming the node and its retries."""

    def flaky(params: Any, ctx: Any) -> Any:
        raise ConnectionError("database unavailable")

    twin.handlers = handler_registry(request=flaky)
    twin.settings = StepSettings(
        holder_id="worker-a", default_retries=2, generations=LEGACY_GENERATIONS
    )
    outcomes = []
    envelope = twin.envelope_start(10)
    for _ in range(5):
        result = await twin.process(envelope)
        outcomes.append(result.outcome)
        if not result.schedule:
            break
        envelope = result.schedule[0][0]
    assert outcomes == ["retry_scheduled", "retry_scheduled", "node_budget_exhausted"]
    assert result.disposition is Disposition.DEAD_LETTER
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert state.error is not None and state.error.node_id == "request"
    assert "after 2 retries" in state.error.message


async def test_the_watchdog_keeps_the_carrier_from_looking_idle(twin: Twin) -> None:
    """W5/I0: each successful renewal refreshes the holder's pending entry (XCLAIM JUSTID)."""
    touched: list[list[str]] = []
    real_touch = twin.queue.touch

    async def record_touch(consumer: str, ids: Any) -> int:
        touched.append(list(ids))
        return await real_touch(consumer, ids)

    twin.queue.touch = record_touch  # type: ignore[method-assign]

    async def long_request(params: Any, ctx: Any) -> Any:
        for _ in range(6):
            await asyncio.sleep(0)
        return {"id": 1}

    twin.sleep = twin.tick
    twin.handlers = handler_registry(request=long_request)
    await twin.queue.enqueue(twin.envelope_start(5000))
    [delivery] = await twin.queue.read("worker-a", count=1, block_ms=1)
    assert delivery.envelope is not None
    await twin.process(delivery.envelope, message_id=delivery.message_id)
    assert touched and all(ids == [delivery.message_id] for ids in touched)


async def test_the_watchdog_records_the_open_nodes_heartbeat(twin: Twin) -> None:
    """W15: each successful renewal during a long node records the node and the time."""
    seen: list[NodeHeartbeat | None] = []

    async def long_request(params: Any, ctx: Any) -> Any:
        assert await twin.executions.last_heartbeat("x-1") is None
        for _ in range(6):
            await asyncio.sleep(0)
        seen.append(await twin.executions.last_heartbeat("x-1"))
        return {"id": 1}

    twin.sleep = twin.tick
    twin.handlers = handler_registry(request=long_request)
    started_ms = twin.clock.now_ms()
    result = await twin.process(twin.envelope_start(5000))
    assert result.outcome == "suspended"
    [heartbeat] = seen
    assert heartbeat is not None and heartbeat.node_id == "request"
    assert started_ms < heartbeat.last_update_ms <= twin.clock.now_ms()


class HeartbeatFails:
    """Delegates to the real repository; every heartbeat raises ``error``."""

    def __init__(self, inner: MemoryExecutionRepository, error: Exception) -> None:
        self._inner = inner
        self._error = error
        self.attempts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def heartbeat(self, execution_id: str, *, fence: int, node_id: str, now_ms: int) -> None:
        self.attempts += 1
        raise self._error


async def test_a_failing_heartbeat_is_logged_and_the_step_goes_on(
    twin: Twin, caplog: pytest.LogCaptureFixture
) -> None:
    async def long_request(params: Any, ctx: Any) -> Any:
        for _ in range(6):
            await asyncio.sleep(0)
        assert not ctx.cancelled
        return {"id": 1}

    failing = HeartbeatFails(twin.executions, ConnectionError("store unreachable"))
    twin.executions = failing  # type: ignore[assignment]
    twin.sleep = twin.tick
    twin.handlers = handler_registry(request=long_request)
    result = await twin.process(twin.envelope_start(5000))
    assert result.outcome == "suspended" and failing.attempts > 0
    assert "event=heartbeat.failed" in caplog.text


async def test_a_fenced_heartbeat_means_the_lease_was_lost(twin: Twin) -> None:
    """W4/W15: a heartbeat refused by the fence stops this holder like a lost renewal."""
    seen: list[bool] = []

    async def long_request(params: Any, ctx: Any) -> Any:
        for _ in range(6):
            await asyncio.sleep(0)
        seen.append(ctx.cancelled)
        return {"id": 1}

    twin.executions = HeartbeatFails(  # type: ignore[assignment]
        twin.executions, ExecutionLeaseError("x-1: fence 1 rejected")
    )
    twin.sleep = twin.tick
    twin.handlers = handler_registry(request=long_request)
    result = await twin.process(twin.envelope_start(5000))
    assert (result.disposition, result.outcome) == (Disposition.LEAVE_PENDING, "lease_lost")
    assert seen == [True]


async def test_the_step_reads_tombstones_through_its_execution_repository(twin: Twin) -> None:
    """W13: the step needs no tombstone store of its own: given only the repository that
    wrote the tombstone, it drops a deleted execution's carriers instead of running them."""
    await twin.executions.delete(
        "x-1",
        fence=None,
        tombstone=Tombstone("default", twin.clock.now_ms(), "test"),
        tombstone_ttl_ms=60_000,
    )

    result = await twin.process(twin.envelope_start(10))

    assert (result.disposition, result.outcome) == (Disposition.ACK, "execution_deleted")
    assert await twin.executions.load("x-1") is None
    assert twin.calls.log == []


async def test_a_start_dropped_for_a_deleted_execution_releases_its_dedup_key(twin: Twin) -> None:
    """W13/W6: otherwise the key would answer with the deleted execution for seven days."""
    dedup = MemoryDedupStore(twin.clock)
    assert await dedup.claim("order-7", "x-1", tenant_id="default", ttl_ms=60_000) is None
    await twin.executions.delete(
        "x-1",
        fence=None,
        tombstone=Tombstone("default", twin.clock.now_ms(), "test"),
        tombstone_ttl_ms=60_000,
    )
    process = ProcessTask(
        executions=twin.executions,
        leases=twin.leases,
        leased_load=SequentialLeasedLoad(twin.leases, twin.executions),
        flows=twin.catalog,
        queue=twin.queue,
        subscriptions=twin.subscriptions,
        handlers=twin.handlers,
        clock=twin.clock,
        ids=twin.ids,
        settings=twin.settings,
        counters=twin.counters,
        delay=twin.delay,
        registry=twin.registry,
        dedup=dedup,
        inbox=twin.inbox,
        controls=twin.controls,
        slots=twin.slots,
        waiting=twin.waiting,
        tenants=twin.tenants,
        rate_buckets=twin.rate_buckets,
    )
    start = attrs.evolve(twin.envelope_start(10), dedup_key="order-7")
    result = await process(start)
    assert result.outcome == "execution_deleted"
    assert await dedup.claim("order-7", "x-2", tenant_id="default", ttl_ms=60_000) is None


async def test_a_carrier_runs_in_its_tenants_namespace(twin: Twin) -> None:
    """W24: acme's x-1 and the default tenant's x-1 are two executions."""
    acme_start = attrs.evolve(twin.envelope_start(5000), tenant_id="acme")
    assert (await twin.process(acme_start)).outcome == "suspended"
    assert (await twin.process(twin.envelope_start(10))).outcome == "completed"

    with tenant_scope("acme"):
        acme = await twin.executions.load("x-1")
    default = await twin.executions.load("x-1")
    assert acme is not None and acme.status is ExecutionStatus.SUSPENDED
    assert acme.tenant_id == "acme"
    assert default is not None and default.status is ExecutionStatus.COMPLETED
    [subscription] = await twin.subscriptions.find("approval_decision")
    assert subscription.tenant_id == "acme"


async def test_another_tenants_event_never_resumes_an_execution(twin: Twin) -> None:
    """W24, V2: the same correlation id from another tenant matches nothing."""
    await twin.process(attrs.evolve(twin.envelope_start(5000), tenant_id="acme"))
    publish = twin.publish_event
    filter_event = twin.filter_event
    foreign = await publish("approval_decision", data={"approved": True}, correlation_id="x-1")
    assert await filter_event(foreign.event_id) == 0

    own = await publish(
        "approval_decision", data={"approved": True}, correlation_id="x-1", tenant_id="acme"
    )
    assert await filter_event(own.event_id) == 1
    [outcome] = await twin.drain_queue()
    assert outcome.outcome == "completed"
    with tenant_scope("acme"):
        state = await twin.executions.load("x-1")
    assert state is not None and state.result == "shipped"


async def test_every_step_records_its_nodes_timing(twin: Twin) -> None:
    """C2: the console's timeline; a wait keeps its start until it resumes."""
    await twin.process(twin.envelope_start(5000))
    suspended = await twin.executions.load("x-1")
    assert suspended is not None
    wait = suspended.node_timings["wait"]
    assert wait.ended_at_ms is None
    assert suspended.node_timings["request"].ended_at_ms is not None

    twin.clock.advance(30)
    assert suspended.suspension is not None
    event = {"event_type": "approval_decision", "data": {"approved": True}}
    subscription = suspended.suspension.subscription_id
    await twin.process(twin.resume(ResumeType.EVENT, event=event, subscription_id=subscription))

    done = await twin.executions.load("x-1")
    assert done is not None
    assert done.node_timings["wait"].started_at_ms == wait.started_at_ms
    assert done.node_timings["wait"].ended_at_ms == twin.clock.now_ms()
    assert set(done.node_timings) == {"request", "check", "wait", "decide", "ship", "done"}
    assert all(
        t.ended_at_ms is not None and t.ended_at_ms >= t.started_at_ms
        for t in done.node_timings.values()
    )
