"""The event-filter service loop on the memory twin (V4, V5): notifications are filtered and
acked, nothing that fails stops the service, a stop finishes the notification in flight and
closes only what can be closed.

Back-offs go through an injected pause that records the delay and returns at once, so these
tests never sleep; reads block for a few milliseconds at most.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import attrs
import pytest

from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.reconciler_cursor import MemoryReconcilerCursor
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.application.ports import EventNotification
from plaita.application.use_cases.events import FilterEvent, PublishEvent
from plaita.application.use_cases.reconcile_events import ReconcileEvents, ReconcileRound
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType
from plaita.domain.events import Event, EventQuery, EventSubscription
from plaita.domain.execution import ExecutionState, ExecutionStatus, Suspension
from plaita.domain.reconcile import ReconcileSettings, ReconcileWindow
from plaita.entrypoints.event_filter import EventFilterService

from ..application.conftest import FakeClock, SequentialIds

INTERVAL_MS = 30_000


class StoreDown(ConnectionError):
    """What a Redis outage looks like to the service."""


class FlakyEventLog(MemoryEventLog):
    """The memory event log; the next ``failing_reads`` reads and ``failing_lists`` listings
    raise."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.failing_reads = 0
        self.failing_lists = 0
        self.acked: list[str] = []

    async def read_notifications(
        self, consumer: str, *, count: int, block_ms: int
    ) -> list[EventNotification]:
        if self.failing_reads:
            self.failing_reads -= 1
            raise StoreDown("read refused")
        return await super().read_notifications(consumer, count=count, block_ms=block_ms)

    async def ack_notification(self, notification_id: str) -> None:
        self.acked.append(notification_id)
        await super().ack_notification(notification_id)

    async def list(self, query: EventQuery) -> Sequence[Event]:
        if self.failing_lists:
            self.failing_lists -= 1
            raise StoreDown("listing refused")
        return await super().list(query)

    async def pending(self) -> list[str]:
        """Event ids of notifications delivered and not acked (claimed back to look)."""
        claimed = await self.reclaim_notifications("inspector", min_idle_ms=0, count=1000)
        return [n.event_id for n in claimed]


@attrs.define
class Recorder:
    """The injected pause: records each back-off and returns at once."""

    delays: list[float] = attrs.field(factory=list)

    async def __call__(self, stop: asyncio.Event, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


@attrs.define
class World:
    clock: FakeClock
    events: FlakyEventLog
    subscriptions: MemorySubscriptionStore
    leases: MemoryLeaseManager
    executions: MemoryExecutionRepository
    queue: MemoryTaskQueue
    cursor: MemoryReconcilerCursor
    ids: SequentialIds
    pause: Recorder = attrs.field(factory=Recorder)

    def filter_event(self) -> FilterEvent:
        return FilterEvent(
            events=self.events,
            subscriptions=self.subscriptions,
            executions=self.executions,
            queue=self.queue,
            clock=self.clock,
            generations=LEGACY_GENERATIONS,
        )

    def reconcile(self) -> ReconcileEvents:
        return ReconcileEvents(
            events=self.events,
            subscriptions=self.subscriptions,
            executions=self.executions,
            queue=self.queue,
            cursor=self.cursor,
            clock=self.clock,
            settings=ReconcileSettings(settle_ms=0),
            generations=LEGACY_GENERATIONS,
        )

    def service(self, **overrides: object) -> EventFilterService:
        options: dict[str, object] = {
            "events": self.events,
            "filter_event": self.filter_event(),
            "consumer": "filter-1",
            "read_block_ms": 5,
            "claim_min_idle_ms": 60_000,
            "reconcile_interval_ms": INTERVAL_MS,
            "pause": self.pause,
            "monotonic": self.clock.monotonic,
        }
        options.update(overrides)
        return EventFilterService(**options)  # type: ignore[arg-type]

    async def suspend(self, execution_id: str, status: ExecutionStatus | None = None) -> str:
        subscription_id = f"sub-{execution_id}"
        await self.subscriptions.add(
            EventSubscription(
                subscription_id=subscription_id,
                event_type="approval_decision",
                execution_id=execution_id,
                flow_id="approval",
                node_id="wait_decision",
                created_at_ms=self.clock.now_ms(),
                correlation_id=execution_id,
            )
        )
        state = ExecutionState.new(
            execution_id=execution_id,
            flow_id="approval",
            flow_version="1",
            fingerprint="fp",
            start_node_id="wait_decision",
            input={},
            now_ms=self.clock.now_ms(),
        ).transition(
            ExecutionStatus.SUSPENDED,
            now_ms=self.clock.now_ms(),
            suspension=Suspension("wait_decision", subscription_id),
        )
        if status is not None:
            state = state.transition(status, now_ms=self.clock.now_ms())
        lease = await self.leases.acquire(execution_id, "writer", ttl_ms=60_000)
        assert lease is not None
        await self.executions.save(state, fence=lease.generation)
        await self.leases.release(lease)
        return subscription_id

    async def publish(self, correlation_id: str) -> Event:
        publish = PublishEvent(
            events=self.events, clock=self.clock, ids=self.ids, inbox=MemoryInbox(self.clock)
        )
        self.clock.advance(0.001)
        return await publish(
            "approval_decision", data={"approved": True}, correlation_id=correlation_id
        )

    async def resumed(self) -> list[str]:
        """Execution ids of the event carriers enqueued since the last call."""
        found = []
        for delivery in await self.queue.read("reader", count=1000, block_ms=0):
            assert delivery.envelope is not None
            assert delivery.envelope.resume_type is ResumeType.EVENT
            found.append(delivery.envelope.execution_id)
        return found


@pytest.fixture
def world() -> World:
    clock, ids = FakeClock(), SequentialIds()
    leases = MemoryLeaseManager(clock)
    return World(
        clock=clock,
        events=FlakyEventLog(clock),
        subscriptions=MemorySubscriptionStore(),
        leases=leases,
        executions=MemoryExecutionRepository(leases),
        queue=MemoryTaskQueue(clock),
        cursor=MemoryReconcilerCursor(),
        ids=ids,
    )


async def run_until(
    service: EventFilterService,
    condition: Callable[[], Awaitable[bool]],
    *,
    stop: asyncio.Event | None = None,
    timeout: float = 5.0,
) -> None:
    """Run the service until ``condition`` holds, then stop it and wait for it to return."""
    stop = stop or asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        async with asyncio.timeout(timeout):
            while not await condition():
                assert not task.done(), f"the service returned early: {task}"
                await asyncio.sleep(0.001)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout)


# --- notifications (V4) -----------------------------------------------------------------


async def test_a_notification_becomes_a_resume_and_is_acked(world: World) -> None:
    await world.suspend("x-1")
    await world.publish("x-1")
    service = world.service()
    found: list[str] = []

    async def resumed() -> bool:
        found.extend(await world.resumed())
        return bool(found) and bool(world.events.acked)

    await run_until(service, resumed)

    assert found == ["x-1"]
    assert await world.events.pending() == []
    assert service.stats.filtered == 1


async def test_a_terminal_executions_wait_is_dropped_not_resumed(world: World) -> None:
    """V4: the filter unregisters the wait of an execution that ended (cancelled here)."""
    await world.suspend("x-1", status=ExecutionStatus.CANCELLED)
    await world.publish("x-1")
    service = world.service()

    async def handled() -> bool:
        return service.stats.filtered == 1

    await run_until(service, handled)

    assert await world.resumed() == []
    assert await world.subscriptions.get("sub-x-1") is None
    assert await world.events.pending() == []


async def test_a_failed_filter_leaves_its_notification_pending_and_the_service_goes_on(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.suspend("x-1")
    await world.suspend("x-2")
    poison = await world.publish("x-1")
    await world.publish("x-2")
    healthy = world.filter_event()

    async def filter_event(event_id: str) -> int:
        if event_id == poison.event_id:
            raise StoreDown("subscription store refused")
        return await healthy(event_id)

    service = world.service(filter_event=filter_event)

    async def second_done() -> bool:
        return service.stats.filtered == 1

    with caplog.at_level(logging.INFO, logger="plaita.outages"):
        await run_until(service, second_done)

    assert await world.resumed() == ["x-2"]
    assert await world.events.pending() == [poison.event_id]
    assert service.stats.filter_failures == 1
    assert world.pause.delays[0] == pytest.approx(0.1)
    warning, recovered = (r for r in caplog.records if r.name == "plaita.outages")
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert warning.getMessage().startswith("event=store.unreachable store=redis loop=filter ")
    assert poison.event_id in warning.getMessage() and "StoreDown" in warning.getMessage()
    assert recovered.getMessage().startswith("event=store.recovered store=redis failures=1 ")


async def test_failed_reads_back_off_and_the_service_goes_on(world: World) -> None:
    await world.suspend("x-1")
    await world.publish("x-1")
    world.events.failing_reads = 3
    service = world.service()

    async def resumed() -> bool:
        return service.stats.filtered == 1

    await run_until(service, resumed)

    assert world.pause.delays[:3] == pytest.approx([0.1, 0.2, 0.4])
    assert service.stats.read_failures == 3
    assert await world.resumed() == ["x-1"]


async def test_a_stop_finishes_the_notification_in_flight_and_leaves_the_rest_pending(
    world: World,
) -> None:
    for name in ("x-1", "x-2", "x-3"):
        await world.suspend(name)
        await world.publish(name)
    stop = asyncio.Event()
    healthy = world.filter_event()
    calls: list[str] = []

    async def filter_event(event_id: str) -> int:
        calls.append(event_id)
        stop.set()  # SIGTERM arrives while the first notification is being filtered
        await asyncio.sleep(0)
        return await healthy(event_id)

    service = world.service(filter_event=filter_event)
    await asyncio.wait_for(service.run(stop), 5)

    assert len(calls) == 1
    assert len(world.events.acked) == 1, "the notification in flight was finished and acked"
    assert await world.resumed() == ["x-1"]
    assert len(await world.events.pending()) == 2


# --- the reconciler (V5) ----------------------------------------------------------------


async def test_a_failing_reconcile_round_does_not_stop_the_service(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.suspend("lost")
    await world.publish("lost")
    # The notification of "lost" was read by a filter that died: it never comes back here.
    await world.events.read_notifications("dead-filter", count=10, block_ms=0)
    world.events.failing_lists = 2
    world.clock.advance(1)
    service = world.service(reconcile=world.reconcile())

    async def recovered() -> bool:
        return service.stats.rounds >= 1

    with caplog.at_level(logging.INFO, logger="plaita.outages"):
        await run_until(service, recovered)

    assert service.stats.failed_rounds == 2
    assert service.stats.replayed == 1, "only the round that succeeded counts"
    assert service.stats.recovered_resumes == 1
    assert await world.resumed() == ["lost"]
    # Back-off after each failure (2 and 4 intervals), the interval after the success.
    round_delays = [d for d in world.pause.delays if d >= 1]
    assert round_delays[:3] == [60.0, 120.0, 30.0]
    # Two failed rounds are one outage: one WARNING (no traceback), one INFO at its end.
    outage = [r for r in caplog.records if r.name == "plaita.outages"]
    assert [(r.levelno, r.getMessage().split()[0]) for r in outage] == [
        (logging.WARNING, "event=store.unreachable"),
        (logging.INFO, "event=store.recovered"),
    ]
    assert "loop=reconcile" in outage[0].getMessage() and outage[0].exc_info is None
    assert "listing refused" in outage[0].getMessage()
    assert "failures=2" in outage[1].getMessage()
    assert await world.cursor.get() is not None


async def test_a_round_still_catching_up_is_followed_at_once(world: World) -> None:
    window = ReconcileWindow(
        since_ms=0, until_ms=10, start_ms=0, cursor_after_ms=10, caught_up=False
    )
    rounds = 0

    async def reconcile() -> ReconcileRound:
        nonlocal rounds
        rounds += 1
        return ReconcileRound(window=window, replayed=0, resumes=0, pages=1, cursor_ms=10)

    service = world.service(reconcile=reconcile)

    async def twice() -> bool:
        return rounds >= 2

    await run_until(service, twice)
    assert world.pause.delays[0] == 0


async def test_a_stop_abandons_the_round_in_progress(world: World) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def reconcile() -> ReconcileRound:
        started.set()
        try:
            await asyncio.Event().wait()  # a round stuck on a slow store
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    service = world.service(reconcile=reconcile)

    async def round_started() -> bool:
        return started.is_set()

    await run_until(service, round_started, timeout=2)
    assert cancelled.is_set()
    assert service.stats.rounds == 0 and service.stats.failed_rounds == 0


# --- background jobs and shutdown -------------------------------------------------------


async def test_a_failing_background_job_is_restarted_until_stop(world: World) -> None:
    runs = 0

    async def janitor(stop: asyncio.Event) -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise StoreDown("prune refused")
        await stop.wait()

    service = world.service(background={"index_janitor": janitor})

    async def third_run() -> bool:
        return runs == 3

    await run_until(service, third_run)
    assert world.pause.delays[:2] == [1.0, 2.0]


@attrs.define
class AsyncClosing:
    closed: int = 0

    async def close(self) -> None:
        self.closed += 1


@attrs.define
class SyncClosing:
    closed: int = 0

    def close(self) -> None:
        self.closed += 1


@attrs.define
class BrokenClosing:
    attempts: int = 0

    async def close(self) -> None:
        self.attempts += 1
        raise StoreDown("teardown failed")


class WithoutClose:
    """A collaborator with nothing to close (the memory subscription store, say)."""


async def test_shutdown_closes_only_collaborators_that_have_close(world: World) -> None:
    bus, sync, broken, plain = AsyncClosing(), SyncClosing(), BrokenClosing(), WithoutClose()
    service = world.service(closeables=[broken, bus, plain, sync, bus])

    async def started() -> bool:
        return True

    await run_until(service, started)

    assert (bus.closed, sync.closed, broken.attempts) == (1, 1, 1)
    assert not hasattr(plain, "close")


async def test_shutdown_without_an_event_bus_closes_nothing_and_returns(world: World) -> None:
    service = world.service()
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(service.run(stop), 5)
    assert service.stats == type(service.stats)()
