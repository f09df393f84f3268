"""No lost early events, none applied twice (V6): the worker step with the inbox, on the
memory twin, fakeredis and real Redis."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import fakeredis
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
from plaita.adapters.redis.delay_queue import RedisDelayQueue
from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.inbox import RedisInbox
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.application.leased_load import SequentialLeasedLoad
from plaita.application.ports import (
    DelayQueue,
    EventLog,
    ExecutionRepository,
    Inbox,
    LeaseManager,
    SubscriptionStore,
    TaskQueue,
)
from plaita.application.use_cases.events import FilterEvent, PublishEvent
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.step import Disposition, ProcessTask, StepSettings
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.events import wait_subscription_id
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED

from ..unit.application.conftest import SequentialIds, handler_registry
from .conftest import FakeClock, real_redis_client

#: Two waits for the same event type in a row: one event must never satisfy both.
TWO_WAITS = {
    "flow_id": "two_waits",
    "start": "first",
    "nodes": [
        {
            "id": "first",
            "type": "event",
            "event_type": "decision",
            "timeout": 3600,
            "timeout_next": "done",
            "next": "second",
        },
        {"id": "second", "type": "event", "event_type": "decision", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


@attrs.define
class World:
    clock: FakeClock
    ids: SequentialIds
    leases: LeaseManager
    executions: ExecutionRepository
    queue: TaskQueue
    subscriptions: SubscriptionStore
    events: EventLog
    inbox: Inbox
    delay: DelayQueue
    flows: FlowCatalog

    def process(self, executions: Any = None) -> ProcessTask:
        return ProcessTask(
            executions=executions or self.executions,
            leases=self.leases,
            leased_load=SequentialLeasedLoad(self.leases, executions or self.executions),
            flows=self.flows,
            queue=self.queue,
            subscriptions=self.subscriptions,
            handlers=handler_registry(),
            clock=self.clock,
            ids=self.ids,
            settings=StepSettings(holder_id="worker-a", generations=LEGACY_GENERATIONS),
            counters=MemoryCounterStore(self.clock),
            delay=self.delay,
            inbox=self.inbox,
            # Not what these tests are about: the memory twins, which answer at once.
            registry=MemoryWorkerRegistry(self.clock),
            dedup=MemoryDedupStore(self.clock),
            controls=MemoryExecutionControls(self.clock),
            slots=MemorySlotTables(),
            waiting=MemoryWaitingNotes(self.clock),
            tenants=MemoryTenantDirectory(),
            rate_buckets=MemoryRateBuckets(),
        )

    async def publish(self, data: dict[str, Any], *, tenant: str = "default") -> str:
        publish = PublishEvent(events=self.events, clock=self.clock, ids=self.ids, inbox=self.inbox)
        event = await publish("decision", data=data, correlation_id="x-1", tenant_id=tenant)
        self.clock.advance(1)
        return event.event_id

    async def filter(self, event_id: str) -> int:
        return await FilterEvent(
            events=self.events,
            subscriptions=self.subscriptions,
            executions=self.executions,
            queue=self.queue,
            clock=self.clock,
            generations=LEGACY_GENERATIONS,
        )(event_id)

    async def drain(self) -> list[str]:
        outcomes = []
        for delivery in await self.queue.read("test", count=100, block_ms=1):
            assert delivery.envelope is not None
            result = await self.process()(delivery.envelope)
            outcomes.append(result.outcome)
            if result.disposition is Disposition.ACK:
                await self.queue.ack(delivery.message_id)
        return outcomes

    async def state(self) -> ExecutionState:
        state = await self.executions.load("x-1")
        assert state is not None
        return state


def start(clock: FakeClock) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id="x-1",
        flow_id="two_waits",
        version=None,
        params={},
        now_ms=clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )


@contextlib.asynccontextmanager
async def redis_client(kind: str, namespace: str) -> AsyncIterator[Any]:
    """fakeredis answering bytes, or a real Redis answering str (``redis-node``, the single
    node; ``redis-cluster``, the cluster): both modes and both topologies get covered."""
    if kind == "fakeredis":
        fake = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=False)
        yield fake
        await fake.aclose()
        return
    client = real_redis_client(kind.removeprefix("redis-"), decode_responses=True)
    try:
        yield client
    finally:
        created = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
        if created:
            await client.delete(*created)
        await client.aclose()


@pytest.fixture(params=["memory", "fakeredis", "redis-node", "redis-cluster"])
async def world(
    request: pytest.FixtureRequest, clock: FakeClock, keys: RedisKeys, namespace: str
) -> AsyncIterator[World]:
    ids = SequentialIds()
    if request.param == "memory":
        leases = MemoryLeaseManager(clock)
        queue = MemoryTaskQueue(clock)
        flows = FlowCatalog(MemoryFlowRepository(), handler_registry(), clock=clock)
        await flows.register(Flow.from_document(TWO_WAITS), owner=SHARED)
        await queue.ensure_group()
        yield World(
            clock,
            ids,
            leases,
            MemoryExecutionRepository(leases),
            queue,
            MemorySubscriptionStore(),
            MemoryEventLog(clock),
            MemoryInbox(clock),
            MemoryDelayQueue(clock, queue),
            flows,
        )
        return
    async with redis_client(request.param, namespace) as client:
        redis_queue = RedisTaskQueue(client, keys)
        flows = FlowCatalog(RedisFlowRepository(client, keys), handler_registry(), clock=clock)
        await flows.register(Flow.from_document(TWO_WAITS), owner=SHARED)
        await redis_queue.ensure_group()
        yield World(
            clock,
            ids,
            RedisLeaseManager(client, keys),
            RedisExecutionRepository(client, keys),
            redis_queue,
            RedisSubscriptionStore(client, keys),
            RedisEventLog(client, keys),
            RedisInbox(client, keys),
            RedisDelayQueue(client, keys),
            flows,
        )


async def test_an_event_published_before_the_start_resumes_the_wait_at_once(world: World) -> None:
    early = await world.publish({"n": 1})

    result = await world.process()(start(world.clock))

    assert result.outcome == "suspended"
    state = await world.state()
    assert state.node_results["first"]["event_id"] == early
    assert state.suspension is not None and state.suspension.node_id == "second", (
        "the one early event satisfied the first wait only"
    )
    first_wait = wait_subscription_id("default", "x-1", "first", 0)
    assert await world.subscriptions.get(first_wait) is None, "its subscription is gone"
    assert await world.delay.pending() == 0, "an event that is already here needs no timer"


async def test_a_wait_without_an_early_event_sets_its_timer(world: World) -> None:
    await world.process()(start(world.clock))

    assert await world.delay.pending() == 1
    state = await world.state()
    assert state.suspension is not None and state.suspension.wake_at_ms is not None


async def test_the_filter_copy_of_an_inbox_event_has_no_effect(world: World) -> None:
    early = await world.publish({"n": 1})
    await world.process()(start(world.clock))
    before = await world.state()

    # The notification reaches the filter late, while `second` waits for the same type.
    assert await world.filter(early) == 1
    assert await world.drain() == ["event_already_taken"]

    assert await world.state() == before


async def test_an_event_the_filter_delivered_is_never_taken_from_the_inbox_again(
    world: World,
) -> None:
    await world.process()(start(world.clock))  # `first` suspends: the inbox is empty
    event_id = await world.publish({"n": 1})
    assert await world.filter(event_id) == 1

    assert await world.drain() == ["suspended"]

    state = await world.state()
    assert state.node_results["first"]["event_id"] == event_id
    assert state.suspension is not None and state.suspension.node_id == "second"
    later = await world.publish({"n": 2})
    assert await world.filter(later) == 1
    assert await world.drain() == ["completed"]
    assert (await world.state()).node_results["second"]["event_id"] == later


@attrs.define
class FailsOnceAfterTheInboxHit:
    """A worker that dies after taking the inbox event, before its checkpoint lands."""

    inner: ExecutionRepository
    crashed: bool = False

    async def save(self, state: ExecutionState, **kwargs: Any) -> None:
        if not self.crashed and "first" in state.node_results:
            self.crashed = True
            raise ConnectionError("worker lost its Redis connection mid-step")
        await self.inner.save(state, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_step_rerun_after_a_crash_takes_the_same_inbox_event(world: World) -> None:
    early = await world.publish({"n": 1})
    crashing = FailsOnceAfterTheInboxHit(world.executions)
    with pytest.raises(ConnectionError):
        await world.process(crashing)(start(world.clock))

    # The carrier was never acked: it is redelivered and the step runs again.
    result = await world.process()(start(world.clock))

    assert result.outcome == "suspended"
    state = await world.state()
    assert state.node_results["first"]["event_id"] == early
    assert state.suspension is not None and state.suspension.node_id == "second"


async def test_another_tenants_early_event_is_not_taken(world: World) -> None:
    await world.publish({"n": 1}, tenant="acme")

    await world.process()(start(world.clock))

    state = await world.state()
    assert state.status is ExecutionStatus.SUSPENDED
    assert state.suspension is not None and state.suspension.node_id == "first"
