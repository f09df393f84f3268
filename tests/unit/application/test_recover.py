"""After a restart that lost the in-memory queue, every live execution gets its way forward
back from its checkpoint (S4, `plaita dev --db`)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.dedup import MemoryDedupStore
from plaita.adapters.memory.delay_queue import MemoryDelayQueue
from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.rate_buckets import MemoryRateBuckets
from plaita.adapters.memory.registry import MemoryWorkerRegistry
from plaita.adapters.memory.slot_tables import MemorySlotTables
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.adapters.memory.waiting_notes import MemoryWaitingNotes
from plaita.application.leased_load import SequentialLeasedLoad
from plaita.application.use_cases.events import FilterEvent, PublishEvent
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.recover import RecoverAfterRestart, RecoveryReport
from plaita.application.use_cases.step import Disposition, ProcessTask, StepSettings
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.execution import ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from .conftest import FakeClock, SequentialIds, handler_registry

WAITS = {
    "flow_id": "waits",
    "start": "first",
    "nodes": [
        {"id": "first", "type": "task", "handler": "t:step", "next": "route"},
        {
            "id": "route",
            "type": "if",
            "condition": "input['kind'] == 'nap'",
            "then": "nap",
            "else": "decision",
        },
        {"id": "nap", "type": "sleep", "duration": 60_000, "next": "done"},
        {"id": "decision", "type": "event", "event_type": "decision", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


@attrs.define
class Process:
    """One incarnation of a dev process: durable state, everything else in memory."""

    clock: FakeClock
    executions: MemoryExecutionRepository
    leases: MemoryLeaseManager
    flows: FlowCatalog
    queue: MemoryTaskQueue = attrs.field(init=False)
    delay: MemoryDelayQueue = attrs.field(init=False)
    subscriptions: MemorySubscriptionStore = attrs.field(factory=MemorySubscriptionStore)
    events: MemoryEventLog = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.queue = MemoryTaskQueue(self.clock)
        self.delay = MemoryDelayQueue(self.clock, self.queue)
        self.events = MemoryEventLog(self.clock)

    def step(self) -> ProcessTask:
        return ProcessTask(
            executions=self.executions,
            leases=self.leases,
            leased_load=SequentialLeasedLoad(self.leases, self.executions),
            flows=self.flows,
            queue=self.queue,
            subscriptions=self.subscriptions,
            handlers=handler_registry(step=lambda params, ctx: "stepped"),
            clock=self.clock,
            ids=SequentialIds("t"),
            settings=StepSettings(
                holder_id="dev", max_steps_per_dispatch=1, generations=LEGACY_GENERATIONS
            ),
            counters=MemoryCounterStore(self.clock),
            delay=self.delay,
            registry=MemoryWorkerRegistry(self.clock),
            dedup=MemoryDedupStore(self.clock),
            inbox=MemoryInbox(self.clock),
            controls=MemoryExecutionControls(self.clock),
            slots=MemorySlotTables(),
            waiting=MemoryWaitingNotes(self.clock),
            tenants=MemoryTenantDirectory(),
            rate_buckets=MemoryRateBuckets(),
        )

    async def drain(self) -> list[str]:
        await self.delay.move_due(now_ms=self.clock.now_ms())
        outcomes = []
        for delivery in await self.queue.read("dev", count=100, block_ms=1):
            assert delivery.envelope is not None
            result = await self.step()(delivery.envelope)
            outcomes.append(result.outcome)
            if result.disposition is Disposition.ACK:
                await self.queue.ack(delivery.message_id)
        return outcomes

    def recover(self) -> RecoverAfterRestart:
        return RecoverAfterRestart(
            executions=self.executions,
            queue=self.queue,
            delay=self.delay,
            subscriptions=self.subscriptions,
            flows=self.flows,
            clock=self.clock,
            generations=LEGACY_GENERATIONS,
        )


@pytest.fixture
async def first(clock: FakeClock) -> Process:
    leases = MemoryLeaseManager(clock)
    flows = FlowCatalog(
        MemoryFlowRepository(), handler_registry(step=lambda p, c: "stepped"), clock=clock
    )
    await flows.register(Flow.from_document(WAITS), owner=SHARED)
    process = Process(clock, MemoryExecutionRepository(leases), leases, flows)
    await process.queue.ensure_group()
    return process


def start(clock: FakeClock, execution_id: str, kind: str) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="waits",
        version=None,
        params={"kind": kind},
        now_ms=clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )


async def restarted(process: Process) -> Process:
    """The same database, a new process: queue, timers and subscriptions are empty."""
    again = Process(process.clock, process.executions, process.leases, process.flows)
    await again.queue.ensure_group()
    return again


async def test_every_live_execution_gets_its_way_forward_back(first: Process) -> None:
    clock = first.clock
    for execution_id, kind in (("napping", "nap"), ("waiting", "decision")):
        await first.queue.enqueue(start(clock, execution_id, kind))
        for _ in range(4):
            await first.drain()
    # One dispatch = one step (max_steps_per_dispatch=1): "busy" stops mid-way, running, and
    # the process dies before its hand-over carrier is read.
    await first.step()(start(clock, "busy", "nap"))
    states = {e: await first.executions.load(e) for e in ("busy", "napping", "waiting")}
    assert {e: s.status for e, s in states.items() if s} == {
        "busy": ExecutionStatus.RUNNING,
        "napping": ExecutionStatus.SUSPENDED,
        "waiting": ExecutionStatus.SUSPENDED,
    }

    second = await restarted(first)
    report = await second.recover()()

    assert report == RecoveryReport(continued=1, timers=1, subscriptions=1)
    for _ in range(4):
        await second.drain()
    assert (await second.executions.load("busy")).status is ExecutionStatus.SUSPENDED  # type: ignore[union-attr]

    clock.advance(60)  # the nap's timer, scheduled again for its recorded wake-up
    for _ in range(3):
        await second.drain()
    assert (await second.executions.load("napping")).status is ExecutionStatus.COMPLETED  # type: ignore[union-attr]

    publish = PublishEvent(
        events=second.events, clock=clock, ids=SequentialIds("e"), inbox=MemoryInbox(clock)
    )
    event = await publish("decision", data={}, correlation_id="waiting")
    filter_event = FilterEvent(
        events=second.events,
        subscriptions=second.subscriptions,
        executions=second.executions,
        queue=second.queue,
        clock=clock,
        generations=LEGACY_GENERATIONS,
    )
    assert await filter_event(event.event_id) == 1, "the wait's subscription is back"
    for _ in range(3):
        await second.drain()
    assert (await second.executions.load("waiting")).status is ExecutionStatus.COMPLETED  # type: ignore[union-attr]


async def test_nothing_to_recover_is_an_empty_report(first: Process) -> None:
    report: Any = await first.recover()()
    assert report.to_json() == {
        "reindexed": 0,
        "continued": 0,
        "timers": 0,
        "subscriptions": 0,
        "skipped": 0,
    }
