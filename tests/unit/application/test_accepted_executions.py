"""An execution exists from its acceptance, and its last failure is part of its state
(ADR 0022): the ``pending`` state a start writes, the worker that takes it up, the reaper
that gives a stranded one its carrier, and the attempt, error and next retry of a failing
node, all on the memory twin with an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.application.actor import Actor, actor_scope
from plaita.application.use_cases.executions import GetExecution
from plaita.application.use_cases.reap import ReapZombies
from plaita.application.use_cases.step import Disposition
from plaita.domain.envelope import LEGACY_GENERATIONS
from plaita.domain.execution import ExecutionStatus
from plaita.domain.history import HistoryKind

from .conftest import handler_registry
from .twin import Twin


async def kinds(twin: Twin, execution_id: str) -> list[HistoryKind]:
    return [entry.kind for entry in (await twin.executions.history(execution_id)).entries]


async def test_a_start_is_pending_at_once_with_who_accepted_it(twin: Twin) -> None:
    with actor_scope(Actor("api", "alice")):
        started = await twin.start_execution(
            "approval", params={"amount": 5}, execution_id="x-1", dedup_key="order-1"
        )

    state = await GetExecution(twin.executions)(started.execution_id)
    assert state.status is ExecutionStatus.PENDING
    assert (state.next_node_id, state.steps, state.dedup_key) == ("request", 0, "order-1")
    assert state.created_at_ms == twin.clock.now_ms()
    [accepted] = (await twin.executions.history("x-1")).entries
    assert accepted.kind is HistoryKind.ACCEPTED
    assert accepted.detail == {
        "input_bytes": len('{"amount":5}'),
        "via": "api",
        "by": "alice",
        "dedup_key": "order-1",
    }


async def test_the_worker_takes_a_pending_execution_up_and_runs_it_to_the_end(
    twin: Twin,
) -> None:
    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")

    [result] = await twin.drain_queue()

    assert result.outcome == "completed"
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.COMPLETED
    assert twin.calls.log == ["request", "ship"]  # each node once, from the start node
    history = await kinds(twin, "x-1")
    assert history[:3] == [HistoryKind.ACCEPTED, HistoryKind.STARTED, HistoryKind.NODE_STARTED]
    assert history[-1] is HistoryKind.ENDED
    [started] = [e for e in (await twin.executions.history("x-1")).entries if e.kind == "started"]
    assert started.worker == "worker-a"


async def test_a_pending_execution_is_seen_running_while_its_first_node_runs(
    twin: Twin,
) -> None:
    seen: list[ExecutionStatus] = []

    async def request(params: Any, ctx: Any) -> Any:
        state = await twin.executions.load("x-1")
        assert state is not None
        seen.append(state.status)
        return {"id": 1}

    twin.handlers = handler_registry(request=request, ship=lambda params, ctx: "shipped")
    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    await twin.drain_queue()

    assert seen == [ExecutionStatus.RUNNING]


async def test_a_pending_execution_is_cancelled_by_its_cancel(twin: Twin) -> None:
    from plaita.domain.envelope import ResumeType

    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    await twin.queue.enqueue(twin.resume(ResumeType.CANCEL))
    for delivery in await twin.queue.read("test", count=100, block_ms=1):
        assert delivery.envelope is not None
        if delivery.envelope.resume_type is ResumeType.CANCEL:
            result = await twin.process(delivery.envelope)
            assert result.outcome == "cancelled"

    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.CANCELLED
    assert twin.calls.log == []


async def test_a_pending_execution_whose_start_carrier_was_lost_is_reaped_and_runs(
    twin: Twin,
) -> None:
    """A crash between the acceptance and the enqueue: the reaper's continue starts it."""
    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    for delivery in await twin.queue.read("test", count=100, block_ms=1):
        await twin.queue.ack(delivery.message_id)  # the carrier is gone
    twin.clock.advance(3600)
    reaper = ReapZombies(
        executions=twin.executions,
        leases=twin.leases,
        queue=twin.queue,
        flows=twin.catalog,
        counters=twin.counters,
        clock=twin.clock,
        holder_id="reaper",
        lease_ttl_ms=1000,
        controls=twin.controls,
        tenants=MemoryTenantDirectory(),
        generations=LEGACY_GENERATIONS,
    )

    report = await reaper()

    assert [item.execution_id for item in report.items] == ["x-1"]
    [result] = await twin.drain_queue()
    assert result.outcome == "completed" and twin.calls.log == ["request", "ship"]


async def test_a_second_start_of_a_pending_id_leaves_it_as_accepted(twin: Twin) -> None:
    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    twin.clock.advance(5)
    await twin.start_execution("approval", params={"amount": 9}, execution_id="x-1")

    state = await twin.executions.load("x-1")
    assert state is not None and state.input == {"amount": 5}
    assert await kinds(twin, "x-1") == [HistoryKind.ACCEPTED]
    outcomes = [result.outcome for result in await twin.drain_queue()]
    assert outcomes.count("completed") == 1 and twin.calls.log == ["request", "ship"]


async def test_a_failing_node_shows_its_attempt_error_and_next_retry_until_it_succeeds(
    twin: Twin,
) -> None:
    calls: list[int] = []

    def flaky(params: Any, ctx: Any) -> Any:
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise ConnectionError(f"database unavailable ({len(calls)})")
        return {"id": 1}

    twin.handlers = handler_registry(request=flaky, ship=lambda params, ctx: "shipped")
    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    [first] = await twin.drain_queue()
    assert first.outcome == "retry_scheduled"

    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.RUNNING
    failure = state.last_failure
    assert failure is not None
    assert (failure.node_id, failure.attempt, failure.error_class) == (
        "request",
        1,
        "ConnectionError",
    )
    assert failure.message == "database unavailable (1)" and failure.transient
    [(copy, due)] = first.schedule
    assert failure.retry_at_ms == due and failure.at_ms == twin.clock.now_ms()

    second = await twin.process(copy)
    assert second.outcome == "retry_scheduled"
    state = await twin.executions.load("x-1")
    assert state is not None and state.last_failure is not None
    assert state.last_failure.attempt == 2

    third = await twin.process(second.schedule[0][0])
    assert third.disposition is Disposition.ACK and third.outcome == "completed"
    state = await twin.executions.load("x-1")
    assert state is not None and state.last_failure is None
    assert calls == [1, 2, 3]  # ctx.attempt counts across deliveries (E15)


async def test_a_failure_out_of_retries_keeps_its_last_failure_with_no_retry(
    twin: Twin,
) -> None:
    def broken(params: Any, ctx: Any) -> Any:
        raise ValueError("bad order")

    twin.handlers = handler_registry(request=broken)
    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    await twin.drain_queue()

    state = await twin.executions.load("x-1")
    assert state is not None and state.status is ExecutionStatus.ERROR
    assert state.last_failure is not None
    assert (state.last_failure.error_class, state.last_failure.retry_at_ms) == ("ValueError", None)


@pytest.mark.parametrize("status", [ExecutionStatus.PENDING])
async def test_a_pending_execution_cannot_be_retried_by_an_operator(
    twin: Twin, status: ExecutionStatus
) -> None:
    from plaita.domain.operator_controls import Verdict, decide_retry

    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    state = await twin.executions.load("x-1")
    assert state is not None and state.status is status

    decision = decide_retry(state, from_node=None, flow_nodes={"request"})

    assert decision.verdict is Verdict.REFUSE and "it is pending" in decision.detail


async def test_a_task_nodes_history_has_the_params_its_handler_got(twin: Twin) -> None:
    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    await twin.drain_queue()

    started = [
        e for e in (await twin.executions.history("x-1")).entries if e.kind == "node_started"
    ]
    by_node = {e.node_id: e.detail for e in started}
    assert "params" in by_node["request"]  # a task: its rendered params (here none: {})
    assert by_node["check"] == {}  # an if node has no params


async def test_an_event_taken_from_the_inbox_is_in_the_history_with_its_path(twin: Twin) -> None:
    """V6: published before the wait; the wait takes it at once, and the history says how."""
    from plaita.application.use_cases.events import PublishEvent

    await twin.start_execution("approval", params={"amount": 5000}, execution_id="x-1")
    publish = PublishEvent(events=twin.events, clock=twin.clock, ids=twin.ids, inbox=twin.inbox)
    event = await publish("approval_decision", data={"approved": True}, correlation_id="x-1")

    [result] = await twin.drain_queue()

    assert result.outcome == "completed"
    [received] = [
        e for e in (await twin.executions.history("x-1")).entries if e.kind == "event_received"
    ]
    assert received.node_id == "wait"
    assert received.detail == {
        "event_id": event.event_id,
        "event_type": "approval_decision",
        "via": "inbox",
    }


async def test_an_attempt_whose_worker_died_is_in_the_history(twin: Twin) -> None:
    """A dispatch cut short mid-step (as by kill -9) leaves no checkpoint; the next one
    notices its open attempt and records it: which node, how many crashes, whose lease."""
    from .test_attempts import a_crashed_attempt

    await twin.start_execution("approval", params={"amount": 5}, execution_id="x-1")
    [delivery] = await twin.queue.read("test", count=10, block_ms=1)
    assert delivery.envelope is not None
    await a_crashed_attempt(twin, delivery.envelope)

    result = await twin.process(delivery.envelope)

    assert result.outcome == "completed"
    entries = (await twin.executions.history("x-1")).entries
    [crashed] = [e for e in entries if e.kind == "attempt_crashed"]
    assert crashed.node_id == "request" and crashed.detail["crashes"] == 1
    assert crashed.detail["generation"] >= 1 and crashed.worker == "worker-a"
