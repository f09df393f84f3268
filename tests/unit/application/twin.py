"""The worker step wired to the memory twin, for the application tests of ProcessTask."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

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
from plaita.application.engine.children import NO_CHILD_EXECUTIONS, ChildExecutions
from plaita.application.handlers import HandlerRegistry
from plaita.application.leased_load import SequentialLeasedLoad
from plaita.application.null_objects import NO_TRACING, NoHttpClient
from plaita.application.ports import HttpClient, Tracer
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.events import FilterEvent, PublishEvent
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.start_execution import StartExecution
from plaita.application.use_cases.step import Disposition, ProcessTask, StepSettings
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from .conftest import FakeClock, SequentialIds, handler_registry

APPROVAL = {
    "flow_id": "approval",
    "start": "request",
    "nodes": [
        {"id": "request", "type": "task", "handler": "t:request", "next": "check"},
        {"id": "check", "type": "if", "condition": "amount > 1000", "then": "wait", "else": "auto"},
        {"id": "wait", "type": "event", "event_type": "approval_decision", "next": "decide"},
        {
            "id": "decide",
            "type": "if",
            "condition": "$NODE['wait']['data']['approved']",
            "then": "ship",
            "else": "reject",
        },
        {"id": "auto", "type": "task", "handler": "t:ship", "next": "done"},
        {"id": "ship", "type": "task", "handler": "t:ship", "next": "done"},
        {"id": "reject", "type": "task", "handler": "t:reject", "next": "done"},
        {"id": "done", "type": "end", "output": "$LAST_NODE"},
    ],
}


class Calls:
    def __init__(self) -> None:
        self.log: list[str] = []

    def handlers(self) -> HandlerRegistry:
        def record(name: str, result: Any) -> Any:
            def handler(params: Any, ctx: Any) -> Any:
                self.log.append(name)
                return result

            return handler

        return handler_registry(
            request=record("request", {"id": 1}),
            ship=record("ship", "shipped"),
            reject=record("reject", "rejected"),
        )


@attrs.define
class Twin:
    clock: FakeClock
    ids: SequentialIds
    calls: Calls
    leases: MemoryLeaseManager
    executions: MemoryExecutionRepository
    queue: MemoryTaskQueue
    subscriptions: MemorySubscriptionStore
    events: MemoryEventLog
    flows: MemoryFlowRepository
    handlers: HandlerRegistry
    counters: MemoryCounterStore
    delay: MemoryDelayQueue
    dedup: MemoryDedupStore
    settings: StepSettings = attrs.field(
        factory=lambda: StepSettings(holder_id="worker-a", generations=LEGACY_GENERATIONS)
    )
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    inbox: MemoryInbox = attrs.field(
        default=attrs.Factory(lambda self: MemoryInbox(self.clock), takes_self=True)
    )
    registry: MemoryWorkerRegistry = attrs.field(
        default=attrs.Factory(lambda self: MemoryWorkerRegistry(self.clock), takes_self=True)
    )
    controls: MemoryExecutionControls = attrs.field(
        default=attrs.Factory(lambda self: MemoryExecutionControls(self.clock), takes_self=True)
    )
    #: The slot tables of concurrency keys and tenant quotas (E1a).
    slots: MemorySlotTables = attrs.field(factory=MemorySlotTables)
    #: Why an execution waits for room to run (flow control).
    waiting: MemoryWaitingNotes = attrs.field(
        default=attrs.Factory(lambda self: MemoryWaitingNotes(self.clock), takes_self=True)
    )
    #: Tenants' status records and parked carriers (W24).
    tenants: MemoryTenantDirectory = attrs.field(factory=MemoryTenantDirectory)
    #: Rate limit buckets of task and http nodes (W23).
    rate_buckets: MemoryRateBuckets = attrs.field(factory=MemoryRateBuckets)
    #: The lifecycle listeners every dispatch tells (E9).
    listeners: list[object] = attrs.field(factory=list)
    #: What records the spans of its use cases (C6): none unless a test gives a tracer.
    tracer: Tracer = NO_TRACING
    #: What the http nodes call (E11): none unless a test gives one.
    http: HttpClient = attrs.field(factory=NoHttpClient)
    #: What the subflow and map nodes start and read (E13, E14): none unless a test gives it.
    children: ChildExecutions = NO_CHILD_EXECUTIONS

    @property
    def catalog(self) -> FlowCatalog:
        return FlowCatalog(self.flows, self.handlers, clock=self.clock)

    @property
    def process(self) -> ProcessTask:
        """The worker step wired to this twin's adapters, handlers and settings."""
        return ProcessTask(
            executions=self.executions,
            leases=self.leases,
            leased_load=SequentialLeasedLoad(self.leases, self.executions),
            flows=self.catalog,
            queue=self.queue,
            subscriptions=self.subscriptions,
            handlers=self.handlers,
            clock=self.clock,
            ids=self.ids,
            settings=self.settings,
            counters=self.counters,
            delay=self.delay,
            registry=self.registry,
            dedup=self.dedup,
            inbox=self.inbox,
            controls=self.controls,
            slots=self.slots,
            waiting=self.waiting,
            tenants=self.tenants,
            rate_buckets=self.rate_buckets,
            listeners=lambda: list(self.listeners),
            sleep=self.sleep,
            tracer=self.tracer,
            http=self.http,
            children=self.children,
        )

    @property
    def start_execution(self) -> StartExecution:
        """StartExecution on this twin's queue and dedup claims (W6)."""
        claims = DedupClaims(dedup=self.dedup, executions=self.executions)
        return StartExecution(
            flows=self.catalog,
            queue=self.queue,
            claims=claims,
            executions=self.executions,
            clock=self.clock,
            ids=self.ids,
            generations=LEGACY_GENERATIONS,
            tracer=self.tracer,
        )

    @property
    def publish_event(self) -> PublishEvent:
        """PublishEvent on this twin's event log, with an inbox of its own (V6)."""
        return PublishEvent(
            events=self.events,
            clock=self.clock,
            ids=self.ids,
            inbox=MemoryInbox(self.clock),
            tracer=self.tracer,
        )

    @property
    def filter_event(self) -> FilterEvent:
        return FilterEvent(
            events=self.events,
            subscriptions=self.subscriptions,
            executions=self.executions,
            queue=self.queue,
            clock=self.clock,
            generations=LEGACY_GENERATIONS,
            tracer=self.tracer,
        )

    def envelope_start(self, amount: int, execution_id: str = "x-1") -> TaskEnvelope:
        return TaskEnvelope.start(
            execution_id=execution_id,
            flow_id="approval",
            version="1",
            params={"amount": amount},
            now_ms=self.clock.now_ms(),
            generations=LEGACY_GENERATIONS,
        )

    def resume(self, kind: ResumeType, execution_id: str = "x-1", **extra: Any) -> TaskEnvelope:
        return TaskEnvelope.resume(
            execution_id=execution_id,
            flow_id="approval",
            resume_type=kind,
            now_ms=self.clock.now_ms(),
            generations=LEGACY_GENERATIONS,
            **extra,
        )

    async def tick(self, seconds: float) -> None:
        """The watchdog's sleep: fake time passes, and the loop lets the step run."""
        self.clock.advance(seconds)
        await asyncio.sleep(0)

    async def drain_queue(self) -> list[Any]:
        """Process every carrier waiting in the queue, acking as the worker would."""
        outcomes = []
        for delivery in await self.queue.read("test", count=100, block_ms=1):
            assert delivery.envelope is not None
            result = await self.process(delivery.envelope)
            outcomes.append(result)
            if result.disposition is Disposition.ACK:
                await self.queue.ack(delivery.message_id)
        return outcomes


async def make_twin(clock: FakeClock, ids: SequentialIds) -> Twin:
    calls = Calls()
    leases = MemoryLeaseManager(clock)
    executions = MemoryExecutionRepository(leases)
    queue = MemoryTaskQueue(clock)
    subscriptions = MemorySubscriptionStore()
    events = MemoryEventLog(clock)
    twin = Twin(
        clock,
        ids,
        calls,
        leases,
        executions,
        queue,
        subscriptions,
        events,
        MemoryFlowRepository(),
        calls.handlers(),
        MemoryCounterStore(clock),
        MemoryDelayQueue(clock, queue),
        MemoryDedupStore(clock),
    )
    await twin.catalog.register(Flow.from_document(APPROVAL), owner=SHARED)
    await queue.ensure_group()
    return twin
