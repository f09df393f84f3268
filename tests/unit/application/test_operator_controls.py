"""Operator controls on the memory twin, through the worker step (W23, W7, W13, W19, I0).

The world is the DI container on the memory backend with a fake clock and in-test handlers,
so the use cases and the worker step are wired exactly as the CLI and the console wire them.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
from dependency_injector import providers

from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.operator_controls import BulkProgress, ControlResult
from plaita.application.use_cases.reap import ReapAction, ReapZombies
from plaita.application.use_cases.step import Disposition
from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.errors import (
    ExecutionRunningError,
    InvalidOperatorRequestError,
    LeaseConflictError,
    OperatorActionRefusedError,
    UnknownExecutionError,
    UnknownFlowError,
    UnknownNodeError,
)
from plaita.domain.execution import ExecutionStatus
from plaita.domain.failures import DeterministicNodeError
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED, FlowOwner
from plaita.domain.operator_controls import ControlFlags, OperatorAction
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from .conftest import FakeClock, SequentialIds, handler_registry

S = ExecutionStatus
WAITING = {
    "flow_id": "waiting",
    "version": "1",
    "start": "prepare",
    "nodes": [
        {"id": "prepare", "type": "task", "handler": "t:prepare", "next": "wait"},
        {"id": "wait", "type": "event", "event_type": "go", "next": "after"},
        {"id": "after", "type": "task", "handler": "t:after", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}
CHAIN = {
    "flow_id": "chain",
    "version": "1",
    "start": "a",
    "nodes": [
        {"id": "a", "type": "task", "handler": "t:a", "next": "b"},
        {"id": "b", "type": "task", "handler": "t:b", "next": "c"},
        {"id": "c", "type": "task", "handler": "t:c", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


@attrs.define
class World:
    container: Container
    clock: FakeClock
    runs: list[str] = attrs.field(factory=list)
    broken: set[str] = attrs.field(factory=set)

    def start(self, flow_id: str, execution_id: str) -> TaskEnvelope:
        return TaskEnvelope.start(
            execution_id=execution_id,
            flow_id=flow_id,
            version="1",
            params={},
            now_ms=self.clock.now_ms(),
            generations=LEGACY_GENERATIONS,
        )

    async def run(self, envelope: TaskEnvelope) -> str:
        return (await self.container.process_task()(envelope)).outcome

    async def drain(self) -> list[str]:
        """Dispatch every queued carrier as a worker would (ack only on ACK)."""
        queue = self.container.queue()
        outcomes: list[str] = []
        for _ in range(20):
            deliveries = await queue.read("worker", count=100, block_ms=1)
            if not deliveries:
                return outcomes
            for delivery in deliveries:
                assert delivery.envelope is not None
                result = await self.container.process_task()(delivery.envelope)
                outcomes.append(result.outcome)
                if result.disposition is Disposition.ACK:
                    await queue.ack(delivery.message_id)
        raise AssertionError(f"the queue never drained: {outcomes}")

    async def queued(self) -> list[TaskEnvelope]:
        """Carriers waiting on the stream, consumed by a probe (the worker never sees them)."""
        found = []
        queue = self.container.queue()
        for delivery in await queue.read("probe", count=100, block_ms=1):
            assert delivery.envelope is not None
            found.append(delivery.envelope)
            await queue.ack(delivery.message_id)
        return found

    async def status(self, execution_id: str) -> ExecutionStatus:
        state = await self.container.executions().load(execution_id)
        assert state is not None
        return state.status

    async def flags(self, execution_id: str) -> ControlFlags:
        return await self.container.controls().get(execution_id)

    async def publish_go(self, execution_id: str) -> int:
        """Publish the event ``waiting`` waits for and let the filter enqueue its resume."""
        event = await self.container.publish_event()(
            "go", data={"ok": True}, correlation_id=execution_id
        )
        return await self.container.filter_event()(event.event_id)

    async def suspended(self, execution_id: str = "x-1") -> None:
        assert await self.run(self.start("waiting", execution_id)) == "suspended"

    async def failed_at_b(self, execution_id: str = "x-1") -> None:
        self.broken.add("b")
        assert await self.run(self.start("chain", execution_id)) == "failed"
        assert await self.status(execution_id) is S.ERROR


@pytest.fixture
async def world(clock: FakeClock, ids: SequentialIds) -> World:
    container = build_container(Settings(backend="memory", consumer_name="w1"))
    world = World(container, clock)

    def task(name: str) -> Any:
        def handler(params: Any, ctx: Any) -> Any:
            world.runs.append(name)
            if name in world.broken:
                raise DeterministicNodeError(f"{name} is broken")
            return {"node": name}

        return handler

    handlers = handler_registry(
        **{name: task(name) for name in ("prepare", "after", "a", "b", "c")}
    )
    container.clock.override(providers.Object(clock))
    container.ids.override(providers.Object(ids))
    container.handlers.override(providers.Object(handlers))
    for document in (WAITING, CHAIN):
        await container.flows().register(Flow.from_document(document), owner=SHARED)
    await container.queue().ensure_group()
    return world


# --- pause / unpause (W23, I0) ----------------------------------------------------------------


async def test_a_paused_suspended_execution_parks_its_event_and_unpause_completes_it(
    world: World,
) -> None:
    await world.suspended()
    paused = await world.container.pause_execution()("x-1")
    assert (paused.outcome, paused.flags.paused) == ("paused", True)

    assert await world.publish_go("x-1") == 1
    assert await world.drain() == ["parked"]
    assert await world.status("x-1") is S.SUSPENDED
    assert (await world.flags("x-1")).parked == 1
    assert "after" not in world.runs

    unpaused = await world.container.unpause_execution()("x-1")
    assert (unpaused.outcome, unpaused.requeued) == ("unpaused", 1)
    assert unpaused.flags == ControlFlags()
    assert await world.drain() == ["completed"]
    assert world.runs == ["prepare", "after"]


async def test_a_parked_carrier_keeps_its_age_stream_id_included(world: World) -> None:
    """W14: parking and unparking must not make a carrier look younger than it is."""
    await world.suspended()
    await world.container.pause_execution()("x-1")
    stream_ms = world.clock.now_ms() - 5_000
    carrier = TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="waiting",
        resume_type=ResumeType.CONTINUE,
        now_ms=world.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )

    result = await world.container.process_task()(carrier, message_id=f"{stream_ms}-0")

    assert result.outcome == "parked"
    [parked] = await world.container.controls().parked("x-1")
    assert parked.envelope == attrs.evolve(carrier, timestamp_ms=stream_ms)


async def test_unpause_with_parked_carriers_leaves_a_delayed_safety_net(world: World) -> None:
    await world.suspended()
    await world.container.pause_execution()("x-1")
    await world.publish_go("x-1")
    await world.drain()

    await world.container.unpause_execution()("x-1")

    assert await world.container.delay_queue().pending() == 1
    assert await world.drain() == ["completed"]
    world.clock.advance(61)
    await world.container.delay_queue().move_due(now_ms=world.clock.now_ms())
    # The net's continue meets a completed execution: a short-circuit, nothing runs again.
    assert await world.drain() == ["terminal"]
    assert world.runs == ["prepare", "after"]


async def test_a_paused_running_execution_parks_its_continue_and_takes_no_step(
    world: World,
) -> None:
    await world.failed_at_b()
    world.broken.clear()
    await world.container.retry_execution()("x-1", from_node="b")
    await world.container.pause_execution()("x-1")

    assert await world.drain() == ["parked"]
    assert await world.status("x-1") is S.RUNNING
    assert world.runs == ["a", "b"]

    await world.container.unpause_execution()("x-1")
    assert await world.drain() == ["completed"]
    assert world.runs == ["a", "b", "b", "c"]


async def test_unpause_of_a_live_execution_with_nothing_parked_enqueues_a_continue(
    world: World,
) -> None:
    await world.suspended()
    await world.container.pause_execution()("x-1")

    result = await world.container.unpause_execution()("x-1")

    assert (result.outcome, result.requeued) == ("unpaused", 0)
    [carrier] = await world.queued()
    assert carrier.resume_type is ResumeType.CONTINUE
    assert await world.container.delay_queue().pending() == 0


async def test_pausing_twice_and_unpausing_a_running_one_are_no_ops(world: World) -> None:
    await world.suspended()
    await world.container.pause_execution()("x-1")
    again = await world.container.pause_execution()("x-1")
    assert again.outcome == "already_paused"
    await world.container.unpause_execution()("x-1")
    await world.queued()

    not_paused = await world.container.unpause_execution()("x-1")

    assert not_paused.outcome == "not_paused"
    assert await world.queued() == []


async def test_a_terminal_execution_cannot_be_paused(world: World) -> None:
    await world.failed_at_b()
    with pytest.raises(OperatorActionRefusedError, match="'x-1': it is error"):
        await world.container.pause_execution()("x-1")
    assert await world.flags("x-1") == ControlFlags()


async def test_carriers_left_parked_by_a_half_done_unpause_are_enqueued_by_the_worker(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.suspended()
    await world.container.pause_execution()("x-1")
    await world.publish_go("x-1")
    assert await world.drain() == ["parked"]
    # An unpause that stopped right after clearing the flag, before re-enqueueing.
    await world.container.controls().set_flags("x-1", paused=False)

    with caplog.at_level(logging.WARNING, "plaita.worker.step"):
        assert await world.run(world.start("waiting", "x-1")) == "already_suspended"

    assert "event=carrier.unparked_stranded" in caplog.text
    assert (await world.flags("x-1")).parked == 0
    assert await world.drain() == ["completed"]


# --- cancel: flag first, then the lease (W23, W7 rows 7-8) ----------------------------------------


async def test_cancel_flags_first_then_the_worker_cancels_under_the_lease(world: World) -> None:
    await world.suspended()
    subscription = await world.container.subscriptions().find("go")
    assert len(subscription) == 1

    result = await world.container.cancel_execution()("x-1")

    assert (result.outcome, result.flags.cancel_requested) == ("cancel_requested", True)
    assert await world.status("x-1") is S.SUSPENDED  # flag only: nothing changes yet
    assert await world.drain() == ["cancelled"]
    assert await world.status("x-1") is S.CANCELLED
    assert await world.container.subscriptions().find("go") == []


async def test_a_paused_execution_can_still_be_cancelled(world: World) -> None:
    await world.suspended()
    await world.container.pause_execution()("x-1")
    await world.container.cancel_execution()("x-1")

    assert await world.drain() == ["cancelled"]
    assert await world.status("x-1") is S.CANCELLED


async def test_the_cancel_flag_cancels_on_any_carrier_if_the_cancel_carrier_is_lost(
    world: World,
) -> None:
    await world.suspended()
    await world.container.cancel_execution()("x-1")
    await world.queued()  # the cancel carrier is lost

    await world.publish_go("x-1")
    assert await world.drain() == ["cancelled"]
    assert "after" not in world.runs


@pytest.mark.parametrize("setup", ["failed", "cancelled"])
async def test_a_terminal_execution_cannot_be_cancelled(world: World, setup: str) -> None:
    if setup == "failed":
        await world.failed_at_b()
    else:
        await world.suspended()
        await world.container.cancel_execution()("x-1")
        await world.drain()
    with pytest.raises(OperatorActionRefusedError, match="cannot cancel execution 'x-1'"):
        await world.container.cancel_execution()("x-1")


# --- retry (W23, W7) --------------------------------------------------------------------------


async def test_retry_from_a_node_restarts_there_with_a_fresh_budget_for_it(world: World) -> None:
    await world.failed_at_b()
    counters = world.container.counters()
    await counters.apply(
        "x-1",
        [CounterChange(Counter.NODE_RETRIES, CounterOp.INCREMENT, n) for n in ("a", "b", "b")],
        ttl_ms=60_000,
    )
    world.broken.clear()

    result = await world.container.retry_execution()("x-1", from_node="b")

    assert (result.outcome, result.node_id, result.status) == ("restarted", "b", S.RUNNING)
    state = await world.container.executions().load("x-1")
    assert state is not None and (state.status, state.next_node_id, state.error) == (
        S.RUNNING,
        "b",
        None,
    )
    assert (await counters.read("x-1")).node_retries == {"a": 1}
    assert await world.drain() == ["completed"]
    assert world.runs == ["a", "b", "b", "c"]  # same id; a did not run again


async def test_retry_from_a_node_finds_the_flow_in_the_executions_own_tenant(
    world: World,
) -> None:
    """W24, ADR 0011: a flow only acme has is found for acme's execution, not for default."""
    solo = {**CHAIN, "flow_id": "solo"}
    await world.container.flows().register(Flow.from_document(solo), owner=FlowOwner("acme"))
    world.broken.add("b")
    with tenant_scope("acme"):
        start = attrs.evolve(world.start("solo", "x-9"), tenant_id="acme")
        assert await world.run(start) == "failed"
        world.broken.clear()

        result = await world.container.retry_execution()("x-9", from_node="b")

        assert result.outcome == "restarted"
    with pytest.raises(UnknownFlowError, match="'solo'"):
        await world.container.flows().get("solo")


async def test_retry_of_an_error_without_a_node_is_the_w7_wake_up(world: World) -> None:
    await world.failed_at_b()
    world.broken.clear()

    result = await world.container.retry_execution()("x-1")

    assert (result.outcome, result.node_id) == ("wake_up_enqueued", None)
    assert await world.drain() == ["completed"]
    assert world.runs == ["a", "b", "b", "c"]
    assert (await world.container.counters().read("x-1")).wakeups == 1


async def test_retry_of_a_cancelled_execution_withdraws_the_cancel_and_resumes_its_node(
    world: World,
) -> None:
    await world.suspended()
    await world.container.cancel_execution()("x-1")
    assert await world.drain() == ["cancelled"]

    result = await world.container.retry_execution()("x-1")

    assert (result.outcome, result.node_id) == ("restarted", "wait")
    assert result.flags.cancel_requested is False
    assert await world.drain() == ["suspended"]
    await world.publish_go("x-1")
    assert await world.drain() == ["completed"]


async def test_retry_of_a_suspended_execution_from_a_node_drops_its_wait(world: World) -> None:
    await world.suspended()

    await world.container.retry_execution()("x-1", from_node="after")

    assert await world.container.subscriptions().find("go") == []
    assert await world.drain() == ["completed"]
    assert world.runs == ["prepare", "after"]


async def test_retry_of_a_running_execution_is_a_conflict(world: World) -> None:
    await world.failed_at_b()
    await world.container.retry_execution()("x-1", from_node="a")
    with pytest.raises(ExecutionRunningError, match="it is running"):
        await world.container.retry_execution()("x-1", from_node="a")


async def test_retry_from_a_node_not_in_the_flow_is_a_named_error(world: World) -> None:
    await world.failed_at_b()
    with pytest.raises(UnknownNodeError, match=r"'nope' is not in flow 'chain'.*a, b, c, done"):
        await world.container.retry_execution()("x-1", from_node="nope")
    assert await world.status("x-1") is S.ERROR
    assert await world.queued() == []


async def test_retry_of_a_completed_execution_is_refused(world: World) -> None:
    assert await world.run(world.start("chain", "x-1")) == "completed"
    with pytest.raises(OperatorActionRefusedError, match="start a new execution"):
        await world.container.retry_execution()("x-1", from_node="a")


async def test_retry_while_another_holder_has_the_lease_changes_nothing(world: World) -> None:
    await world.failed_at_b()
    lease = await world.container.leases().acquire("x-1", "w9", ttl_ms=60_000)
    assert lease is not None

    await world.container.controls().set_flags("x-1", cancel_requested=True)

    with pytest.raises(LeaseConflictError, match="advanced by w9"):
        await world.container.retry_execution()("x-1", from_node="b")

    assert await world.status("x-1") is S.ERROR
    assert await world.queued() == []
    flags = await world.container.controls().get("x-1")
    assert flags.cancel_requested, "a refused retry leaves the cancel request in place"


async def test_a_retry_whose_lease_release_fails_still_hands_its_continue_to_the_worker(
    world: World,
) -> None:
    """W23, I0: the restart is saved, so its continue is enqueued; the borrowed lease lapses
    within its TTL and the continue then advances the execution."""
    await world.failed_at_b()
    world.broken.clear()
    leases = world.container.leases()
    release = leases.release

    async def release_fails(lease: Any) -> bool:
        raise ConnectionError("Connection closed by server")

    leases.release = release_fails  # type: ignore[method-assign]
    result = await world.container.retry_execution()("x-1", from_node="b")
    leases.release = release  # type: ignore[method-assign]

    assert (result.outcome, result.status) == ("restarted", S.RUNNING)
    [carrier] = await world.queued()
    assert carrier.resume_type is ResumeType.CONTINUE
    held = await leases.holder("x-1")
    assert held is not None and held.holder_id == "operator:w1"
    world.clock.advance(Settings().lease_ttl_seconds)
    assert await leases.holder("x-1") is None
    assert await world.run(carrier) == "completed"


@pytest.mark.parametrize(
    "action",
    ["pause_execution", "unpause_execution", "cancel_execution", "continue_execution"],
)
async def test_every_action_names_an_unknown_execution(world: World, action: str) -> None:
    with pytest.raises(UnknownExecutionError, match="'ghost'"):
        await getattr(world.container, action)()("ghost")


async def test_resume_refuses_a_suspended_and_a_failed_execution(world: World) -> None:
    """A suspended execution waits for its event or timer: a continue would do nothing."""
    await world.suspended()
    with pytest.raises(OperatorActionRefusedError, match="publish the event it waits for"):
        await world.container.continue_execution()("x-1")
    assert await world.queued() == []
    await world.failed_at_b("x-2")
    with pytest.raises(OperatorActionRefusedError, match="retry it instead"):
        await world.container.continue_execution()("x-2")


# --- bulk and listing -------------------------------------------------------------------------


async def test_a_bulk_dry_run_lists_the_matching_executions_and_changes_nothing(
    world: World,
) -> None:
    for n in range(3):
        await world.suspended(f"w-{n}")
        world.clock.advance(1)
    await world.failed_at_b("c-1")

    result = await world.container.bulk_action()(
        OperatorAction.PAUSE, status=S.SUSPENDED, dry_run=True
    )

    assert result.matched == ("w-2", "w-1", "w-0")
    assert (result.dry_run, result.done) == (True, 0)
    assert [(await world.flags(f"w-{n}")).paused for n in range(3)] == [False, False, False]


async def test_a_bulk_action_collects_failures_and_reports_progress(world: World) -> None:
    await world.suspended("w-0")
    world.clock.advance(1)
    await world.failed_at_b("c-1")
    world.clock.advance(1)
    await world.suspended("w-1")
    seen: list[BulkProgress] = []

    result = await world.container.bulk_action()("cancel", progress=seen.append)

    assert result.matched == ("w-1", "c-1", "w-0")
    assert (result.done, result.outcomes) == (2, {"cancel_requested": 2})
    [failure] = result.failed
    assert failure.execution_id == "c-1"
    assert failure.error.startswith("OperatorActionRefusedError: cannot cancel execution 'c-1'")
    assert [(p.done, p.total, p.ok) for p in seen] == [(1, 3, True), (2, 3, False), (3, 3, True)]
    assert result.to_json()["failed"] == [failure.to_json()]
    assert await world.drain() == ["cancelled", "cancelled"]


async def test_a_bulk_action_stops_at_its_limit_and_refuses_a_bad_request(world: World) -> None:
    for n in range(4):
        await world.suspended(f"w-{n}")
        world.clock.advance(1)
    result = await world.container.bulk_action()("pause", flow_id="waiting", limit=2)
    assert result.matched == ("w-3", "w-2")
    assert [(await world.flags(f"w-{n}")).paused for n in range(4)] == [False, False, True, True]
    with pytest.raises(InvalidOperatorRequestError, match="'stop'"):
        await world.container.bulk_action()("stop")
    with pytest.raises(InvalidOperatorRequestError, match="from 1 to 10000"):
        await world.container.bulk_action()("pause", limit=0)


async def test_the_listing_pages_newest_first_with_the_operator_flags(world: World) -> None:
    for n in range(3):
        await world.suspended(f"w-{n}")
        world.clock.advance(1)
    await world.container.pause_execution()("w-1")
    listing = world.container.list_executions()

    first = await listing(limit=2)
    second = await listing(limit=2, cursor=first.next_cursor)

    assert [s.execution_id for s, _ in first.items] == ["w-2", "w-1"]
    assert [f.paused for _, f in first.items] == [False, True]
    assert first.next_cursor is not None
    assert [s.execution_id for s, _ in second.items] == ["w-0"]
    assert second.next_cursor is None
    summary = first.to_json()["items"][1]
    assert (summary["execution_id"], summary["paused"], summary["status"]) == (
        "w-1",
        True,
        "suspended",
    )
    assert set(summary) >= {
        "flow_version",
        "tenant_id",
        "next_node_id",
        "last_node_id",
        "created_at_ms",
        "updated_at_ms",
        "error",
    }


# --- delete (W13) and the reaper (W19) --------------------------------------------------------


async def test_delete_removes_the_flags_and_the_parked_carriers(world: World) -> None:
    await world.suspended()
    await world.container.pause_execution()("x-1")
    await world.publish_go("x-1")
    await world.drain()
    assert (await world.flags("x-1")).parked == 1

    await world.container.delete_execution()("x-1")

    assert await world.flags("x-1") == ControlFlags()
    assert await world.container.controls().parked("x-1") == []


async def test_a_second_delete_removes_flags_written_after_the_first(world: World) -> None:
    """W13: an operator flag that raced the first delete goes with the next one, which keeps
    the first tombstone."""
    await world.suspended()
    first = await world.container.delete_execution()("x-1")
    await world.container.controls().set_flags("x-1", cancel_requested=True)

    second = await world.container.delete_execution()("x-1", reason="again")

    assert (second.tombstone, second.deleted_now) == (first.tombstone, False)
    assert await world.flags("x-1") == ControlFlags()


async def test_a_cancelled_executions_cancel_flag_expires_with_it(world: World) -> None:
    """S5: the flag a cancel leaves behind lasts only as long as the terminal execution
    (7 days by default), not forever."""
    await world.suspended()
    await world.container.cancel_execution()("x-1")
    await world.drain()
    assert await world.status("x-1") is ExecutionStatus.CANCELLED
    assert (await world.flags("x-1")).cancel_requested

    world.clock.advance(7 * 24 * 3600)

    assert await world.container.executions().load("x-1") is None
    assert await world.flags("x-1") == ControlFlags()


async def test_a_woken_up_execution_gets_a_new_retention_from_its_new_end(
    world: World,
) -> None:
    """S5 with W7: the wake-up takes the expiry of the first end away, so the execution is
    kept for a whole retention after its second end."""
    await world.failed_at_b()
    world.clock.advance(6 * 24 * 3600)
    world.broken.clear()

    await world.container.retry_execution()("x-1")
    await world.drain()
    assert await world.status("x-1") is S.COMPLETED
    world.clock.advance(2 * 24 * 3600)  # 8 days after the first end, 2 after the second

    assert await world.container.executions().load("x-1") is not None
    world.clock.advance(5 * 24 * 3600)
    assert await world.container.executions().load("x-1") is None


async def test_the_reaper_skips_a_paused_execution(world: World) -> None:
    await world.failed_at_b()
    world.broken.clear()
    await world.container.retry_execution()("x-1", from_node="b")
    await world.container.pause_execution()("x-1")
    await world.queued()
    world.clock.advance(3600)
    reaper = ReapZombies(
        executions=world.container.executions(),
        leases=world.container.leases(),
        queue=world.container.queue(),
        flows=world.container.flows(),
        counters=world.container.counters(),
        clock=world.clock,
        holder_id="reaper",
        lease_ttl_ms=1000,
        controls=world.container.controls(),
        tenants=MemoryTenantDirectory(),
        generations=LEGACY_GENERATIONS,
    )

    report = await reaper()

    [item] = report.items
    assert item.action is ReapAction.SKIP_PAUSED
    assert "unpause" in item.detail
    assert await world.queued() == []


def test_a_control_result_says_what_it_did_in_json() -> None:
    result = ControlResult(
        "x-1",
        OperatorAction.UNPAUSE,
        "unpaused",
        S.SUSPENDED,
        ControlFlags(parked=0),
        "1 parked carrier(s) enqueued again",
        requeued=1,
    )
    assert result.to_json() == {
        "execution_id": "x-1",
        "action": "unpause",
        "outcome": "unpaused",
        "status": "suspended",
        "paused": False,
        "cancel_requested": False,
        "parked": 0,
        "detail": "1 parked carrier(s) enqueued again",
        "requeued": 1,
        "node_id": None,
    }
