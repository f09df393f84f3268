"""ReconcileEvents on the memory twin: a round replays stored events by time window (V5).

The clock is a fake that the tests move; nothing sleeps. Failures are injected by wrapping
the memory event log, queue and cursor.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Sequence

import attrs
import fakeredis
import pytest
import redis.asyncio as redis

from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.reconciler_cursor import MemoryReconcilerCursor
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.reconciler_cursor import RedisReconcilerCursor
from plaita.application.ports import ReconcilerCursor
from plaita.application.use_cases.events import PublishEvent
from plaita.application.use_cases.reconcile_events import ReconcileEvents, ReconcileRound
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.events import Event, EventQuery, EventSubscription
from plaita.domain.execution import ExecutionState, ExecutionStatus, Suspension
from plaita.domain.reconcile import ReconcileRoundError, ReconcileSettings

from .conftest import FakeClock, SequentialIds

SETTLE_S = 5
SETTINGS = ReconcileSettings(
    lookback_ms=3_600_000, overlap_ms=10_000, settle_ms=SETTLE_S * 1000, page_size=100
)


class StoreDown(ConnectionError):
    """What a Redis outage looks like to the use case."""


class FlakyEventLog(MemoryEventLog):
    """The memory event log, recording every listing; ``fail_pages`` listings raise."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.queries: list[EventQuery] = []
        self.fail_pages: set[int] = set()

    async def list(self, query: EventQuery) -> Sequence[Event]:
        self.queries.append(query)
        if len(self.queries) in self.fail_pages:
            raise StoreDown(f"listing {len(self.queries)} refused")
        return await super().list(query)


class FlakyQueue(MemoryTaskQueue):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.refusals = 0

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        if self.refusals:
            self.refusals -= 1
            raise StoreDown("enqueue refused")
        return await super().enqueue(envelope)


class FlakyCursor(MemoryReconcilerCursor):
    def __init__(self) -> None:
        super().__init__()
        self.refuse_writes = False

    async def set(self, cursor_ms: int) -> None:
        if self.refuse_writes:
            raise StoreDown("cursor write refused")
        await super().set(cursor_ms)


@attrs.define
class World:
    clock: FakeClock
    events: FlakyEventLog
    subscriptions: MemorySubscriptionStore
    leases: MemoryLeaseManager
    executions: MemoryExecutionRepository
    queue: FlakyQueue
    cursor: FlakyCursor
    ids: SequentialIds

    def reconcile(self, settings: ReconcileSettings = SETTINGS) -> ReconcileEvents:
        return ReconcileEvents(
            events=self.events,
            subscriptions=self.subscriptions,
            executions=self.executions,
            queue=self.queue,
            cursor=self.cursor,
            clock=self.clock,
            settings=settings,
            generations=LEGACY_GENERATIONS,
        )

    async def suspend(
        self, execution_id: str, *, event_type: str = "approval_decision"
    ) -> EventSubscription:
        """``execution_id`` suspended on a wait for ``event_type`` correlated by its id."""
        subscription = EventSubscription(
            subscription_id=f"sub-{execution_id}-{self.clock.now_ms()}",
            event_type=event_type,
            execution_id=execution_id,
            flow_id="approval",
            node_id="wait_decision",
            created_at_ms=self.clock.now_ms(),
            correlation_id=execution_id,
        )
        running = ExecutionState.new(
            execution_id=execution_id,
            flow_id="approval",
            flow_version="1",
            fingerprint="fp",
            start_node_id="wait_decision",
            input={},
            now_ms=self.clock.now_ms(),
        )
        await self.store(
            running.transition(
                ExecutionStatus.SUSPENDED,
                now_ms=self.clock.now_ms(),
                suspension=Suspension("wait_decision", subscription.subscription_id),
            )
        )
        await self.subscriptions.add(subscription)
        return subscription

    async def store(self, state: ExecutionState) -> None:
        lease = await self.leases.acquire(state.execution_id, "writer", ttl_ms=60_000)
        assert lease is not None
        await self.executions.save(state, fence=lease.generation)
        await self.leases.release(lease)

    async def publish(self, correlation_id: str, approved: bool = True) -> Event:
        publish = PublishEvent(
            events=self.events, clock=self.clock, ids=self.ids, inbox=MemoryInbox(self.clock)
        )
        return await publish(
            "approval_decision", data={"approved": approved}, correlation_id=correlation_id
        )

    async def resumes(self) -> list[tuple[str, str | None, str | None]]:
        """Every carrier enqueued so far: (execution id, subscription id, event id)."""
        delivered = await self.queue.read("reader", count=1000, block_ms=0)
        found = []
        for delivery in delivered:
            envelope = delivery.envelope
            assert envelope is not None and envelope.resume_type is ResumeType.EVENT
            event_id = None if envelope.event is None else envelope.event["event_id"]
            found.append((envelope.execution_id, envelope.subscription_id, event_id))
        return found


@pytest.fixture
def world(clock: FakeClock, ids: SequentialIds) -> World:
    leases = MemoryLeaseManager(clock)
    return World(
        clock=clock,
        events=FlakyEventLog(clock),
        subscriptions=MemorySubscriptionStore(),
        leases=leases,
        executions=MemoryExecutionRepository(leases),
        queue=FlakyQueue(clock),
        cursor=FlakyCursor(),
        ids=ids,
    )


# --- recovery -------------------------------------------------------------------------


async def test_a_lost_notification_is_recovered_once_the_event_settled(world: World) -> None:
    subscription = await world.suspend("x-1")
    world.clock.advance(1)
    event = await world.publish("x-1")  # its notification is never read: lost
    world.clock.advance(1)

    too_fresh = await world.reconcile()()
    assert (too_fresh.replayed, too_fresh.resumes) == (0, 0)
    assert await world.resumes() == [], "a fresh event is the notification stream's"

    world.clock.advance(SETTLE_S + 30)
    done = await world.reconcile()()

    assert (done.replayed, done.resumes) == (1, 1)
    [delivery] = await world.queue.read("reader", count=10, block_ms=0)
    resume = delivery.envelope
    assert resume is not None and resume.event is not None
    assert (resume.execution_id, resume.subscription_id, resume.event["event_id"]) == (
        "x-1",
        subscription.subscription_id,
        event.event_id,
    )
    assert resume.origin == "reconciler"  # the history tells how the event came
    assert await world.cursor.get() == world.clock.now_ms() - SETTLE_S * 1000
    assert done.cursor_ms == await world.cursor.get()


async def test_the_first_round_reads_back_only_the_configured_lookback(world: World) -> None:
    await world.suspend("old")
    await world.suspend("recent")
    await world.publish("old")
    world.clock.advance(90 * 60)
    recent = await world.publish("recent")
    world.clock.advance(30 * 60)

    done = await world.reconcile()()

    assert done.window.since_ms == world.clock.now_ms() - 3_600_000
    assert done.replayed == 1
    assert [(x, e) for x, _, e in await world.resumes()] == [("recent", recent.event_id)]


async def test_the_next_round_reads_an_overlap_before_the_cursor(world: World) -> None:
    """An event stored after the round that should have listed it (a lagging publisher clock)
    is still replayed by the next round, within the overlap."""
    subscription = await world.suspend("x-1")
    world.clock.advance(60)
    await world.reconcile()()
    cursor = await world.cursor.get()
    assert cursor is not None

    late = Event(
        event_id="late-1",
        event_type="approval_decision",
        timestamp_ms=cursor - 3_000,
        data={"approved": False},
        correlation_id="x-1",
    )
    await world.events.append(late)
    world.clock.advance(30)
    done = await world.reconcile()()

    assert done.window.since_ms == cursor - 10_000
    assert await world.resumes() == [("x-1", subscription.subscription_id, "late-1")]


async def test_without_overlap_a_late_event_is_left_behind(world: World) -> None:
    await world.suspend("x-1")
    world.clock.advance(60)
    no_overlap = attrs.evolve(SETTINGS, overlap_ms=0)
    await world.reconcile(no_overlap)()
    cursor = await world.cursor.get()
    assert cursor is not None
    await world.events.append(
        Event("late-1", "approval_decision", cursor - 3_000, correlation_id="x-1")
    )
    world.clock.advance(30)
    assert (await world.reconcile(no_overlap)()).replayed == 0


async def test_full_pages_are_followed_until_a_short_one(world: World) -> None:
    """Seven events, three of them in one millisecond, read two at a time."""
    for name in ("a", "b", "c", "d", "e", "f", "g"):
        await world.suspend(name)
    world.clock.advance(1)
    for name in ("a", "b", "c"):
        await world.publish(name)  # the fake clock stands still: one millisecond
    for name in ("d", "e", "f", "g"):
        world.clock.advance(0.001)
        await world.publish(name)
    world.clock.advance(60)

    done = await world.reconcile(attrs.evolve(SETTINGS, page_size=2))()

    assert done.replayed == 7 and done.resumes == 7
    assert sorted(x for x, _, _ in await world.resumes()) == list("abcdefg")
    assert done.pages == len(world.events.queries) >= 4
    assert all(q.limit >= 2 for q in world.events.queries)


# --- failed rounds ----------------------------------------------------------------------


async def test_a_failed_listing_voids_the_round(world: World) -> None:
    for name in ("a", "b", "c"):
        await world.suspend(name)
        world.clock.advance(0.01)
        await world.publish(name)
    world.clock.advance(60)
    world.events.fail_pages = {2}

    with pytest.raises(ReconcileRoundError) as raised:
        await world.reconcile(attrs.evolve(SETTINGS, page_size=2))()

    message = str(raised.value)
    assert "after filtering 2 event(s) again" in message
    assert "none of them counts as replayed" in message and "StoreDown" in message
    assert isinstance(raised.value.__cause__, StoreDown)
    assert await world.cursor.get() is None, "the cursor moves only after a whole round"

    world.events.fail_pages = set()
    again = await world.reconcile(attrs.evolve(SETTINGS, page_size=2))()
    # The same window again, from its start: every event is filtered once more.
    assert again.window.since_ms == world.clock.now_ms() - 3_600_000
    assert again.replayed == 3
    assert await world.cursor.get() == again.cursor_ms


async def test_a_failed_filter_voids_the_round_and_the_next_round_recovers(world: World) -> None:
    subscription = await world.suspend("x-1")
    world.clock.advance(1)
    event = await world.publish("x-1")
    world.clock.advance(60)
    await world.reconcile()()
    before = await world.cursor.get()
    assert before is not None
    assert await world.resumes() == [("x-1", subscription.subscription_id, event.event_id)]

    second = await world.suspend("x-2")
    world.clock.advance(1)
    lost = await world.publish("x-2")
    world.clock.advance(60)
    world.queue.refusals = 1
    with pytest.raises(ReconcileRoundError, match="enqueue refused"):
        await world.reconcile()()
    assert await world.cursor.get() == before

    done = await world.reconcile()()
    assert (done.replayed, done.resumes) == (1, 1)
    assert await world.resumes() == [("x-2", second.subscription_id, lost.event_id)]
    assert await world.cursor.get() == done.cursor_ms > before


async def test_a_failed_cursor_write_voids_the_round(world: World) -> None:
    await world.suspend("x-1")
    await world.publish("x-1")
    world.clock.advance(60)
    world.cursor.refuse_writes = True

    with pytest.raises(ReconcileRoundError, match="cursor write refused"):
        await world.reconcile()()
    assert await world.cursor.get() is None


async def test_a_failed_cursor_read_fails_before_any_window(world: World) -> None:
    class Unreadable(FlakyCursor):
        async def get(self) -> int | None:
            raise StoreDown("cursor read refused")

    world.cursor = Unreadable()
    with pytest.raises(ReconcileRoundError, match="before its window was known"):
        await world.reconcile()()
    assert world.events.queries == []


# --- what a replay may resume -----------------------------------------------------------


async def test_an_event_already_handled_enqueues_nothing_again(world: World) -> None:
    subscription = await world.suspend("x-1")
    world.clock.advance(1)
    await world.publish("x-1")
    await world.subscriptions.remove(subscription.subscription_id)  # resumed by the stream
    world.clock.advance(60)

    done = await world.reconcile()()

    assert (done.replayed, done.resumes) == (1, 0)
    assert await world.resumes() == []


async def test_an_old_event_never_wakes_a_later_wait(world: World) -> None:
    """The next turn of a loop waits for the same type and correlation: the event that
    resumed the previous turn must not resume this one when it is replayed."""
    first = await world.suspend("x-1")
    world.clock.advance(1)
    await world.publish("x-1")
    await world.subscriptions.remove(first.subscription_id)
    world.clock.advance(0.5)
    later = await world.suspend("x-1")
    world.clock.advance(60)

    done = await world.reconcile()()

    assert (done.replayed, done.resumes) == (1, 0)
    assert await world.subscriptions.get(later.subscription_id) == later


@pytest.mark.parametrize(
    "status", [ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED, ExecutionStatus.ERROR]
)
async def test_a_terminal_executions_wait_is_unregistered_instead_of_resumed(
    world: World, status: ExecutionStatus
) -> None:
    subscription = await world.suspend("x-1")
    suspended = await world.executions.load("x-1")
    assert suspended is not None
    now = world.clock.now_ms()
    if status is ExecutionStatus.COMPLETED:  # finished by a timeout branch meanwhile
        suspended = suspended.transition(ExecutionStatus.RUNNING, now_ms=now)
    await world.store(suspended.transition(status, now_ms=now))
    world.clock.advance(1)
    await world.publish("x-1")
    world.clock.advance(60)

    done = await world.reconcile()()

    assert (done.replayed, done.resumes) == (1, 0)
    assert await world.resumes() == []
    assert await world.subscriptions.get(subscription.subscription_id) is None


async def test_a_missing_executions_wait_is_unregistered(world: World) -> None:
    orphan = EventSubscription(
        subscription_id="sub-gone",
        event_type="approval_decision",
        execution_id="gone",
        flow_id="approval",
        node_id="wait_decision",
        created_at_ms=world.clock.now_ms(),
        correlation_id="gone",
    )
    await world.subscriptions.add(orphan)
    world.clock.advance(1)
    await world.publish("gone")
    world.clock.advance(60)

    assert (await world.reconcile()()).resumes == 0
    assert await world.subscriptions.get("sub-gone") is None


async def test_a_round_reports_what_it_did(world: World) -> None:
    await world.suspend("x-1")
    world.clock.advance(60)
    done = await world.reconcile()()
    assert isinstance(done, ReconcileRound)
    assert (done.replayed, done.resumes, done.pages) == (0, 0, 1)
    assert done.window.caught_up


async def test_an_empty_window_lists_nothing_and_keeps_the_cursor(world: World) -> None:
    await world.cursor.set(world.clock.now_ms() + 60_000)  # a filter with a faster clock
    done = await world.reconcile()()
    assert done.window.is_empty and done.pages == 0
    assert world.events.queries == []
    assert await world.cursor.get() == world.clock.now_ms() + 60_000


# --- the cursor port: one contract, every family --------------------------------------


class CursorContract:
    @pytest.fixture
    def cursor(self) -> ReconcilerCursor:
        raise NotImplementedError

    async def test_no_cursor_before_the_first_round(self, cursor: ReconcilerCursor) -> None:
        assert await cursor.get() is None

    async def test_the_cursor_only_moves_forward(self, cursor: ReconcilerCursor) -> None:
        await cursor.set(1_700_000_000_123)
        assert await cursor.get() == 1_700_000_000_123
        await cursor.set(1_700_000_000_000)
        assert await cursor.get() == 1_700_000_000_123
        await cursor.set(1_700_000_005_001)
        assert await cursor.get() == 1_700_000_005_001


class TestMemoryCursor(CursorContract):
    @pytest.fixture
    def cursor(self) -> ReconcilerCursor:
        return MemoryReconcilerCursor()


@pytest.fixture(params=[False, True], ids=["bytes", "str"])
async def fake_client(request: pytest.FixtureRequest) -> AsyncIterator[redis.Redis]:
    client = fakeredis.FakeAsyncRedis(
        server=fakeredis.FakeServer(), decode_responses=bool(request.param)
    )
    yield client
    await client.aclose()


class TestFakeRedisCursor(CursorContract):
    @pytest.fixture
    def cursor(self, fake_client: redis.Redis) -> ReconcilerCursor:
        return RedisReconcilerCursor(fake_client, RedisKeys("plaita-test"))


@pytest.fixture
async def real_client() -> AsyncIterator[tuple[redis.Redis, RedisKeys]]:
    url = os.environ.get("PLAITA_TEST_REDIS_URL")
    if not url:
        pytest.skip("PLAITA_TEST_REDIS_URL is unset; CI always sets it")
    keys = RedisKeys(f"plaita-test-{uuid.uuid4().hex}")
    client = redis.Redis.from_url(url)
    yield client, keys
    await client.delete(keys.reconciler_cursor())
    await client.aclose()


class TestRedisCursor(CursorContract):
    @pytest.fixture
    def cursor(self, real_client: tuple[redis.Redis, RedisKeys]) -> ReconcilerCursor:
        return RedisReconcilerCursor(*real_client)
