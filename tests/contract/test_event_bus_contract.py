"""EventBus contract (V3, V6, V9), run on the memory bus, on fakeredis and on real Redis.

Every wait is bounded: ``eventually`` polls for at most ``BOUND_S`` seconds, and the close
tests use drain timeouts of a fraction of a second. Retries never sleep (``no_sleep``).
The Redis buses run it with one notification partition and with three (``--partitions``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.event_bus import MemoryEventBus
from plaita.adapters.redis.event_bus import RedisEventBus
from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.inbox import RedisInbox
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.application.event_bus import EventBus, HandlerDispatcher, HandlerOutcome
from plaita.domain.errors import (
    CloseFromHandlerError,
    EventBusClosedError,
    EventBusCloseError,
    PublishSyncInLoopError,
)
from plaita.domain.events import Event, EventSubscription, RetryPolicy
from plaita.domain.partitions import partition_of

from .conftest import real_redis_client

LOGGER = "plaita.events.bus"
BOUND_S = 5.0


class InspectableBus(EventBus, Protocol):
    """What both backends offer beyond the port, for the tests to observe."""

    @property
    def dispatcher(self) -> HandlerDispatcher: ...

    @property
    def listening(self) -> bool: ...


MakeBus = Callable[..., InspectableBus]


def event(
    event_id: str = "ev-1",
    event_type: str = "user.created",
    correlation_id: str | None = None,
    **data: Any,
) -> Event:
    return Event(
        event_id,
        event_type,
        1_760_000_000_000,
        data or {"user": 7},
        correlation_id=correlation_id,
        source="contract",
    )


def subscription(
    subscription_id: str = "sub-1",
    event_type: str = "approval.decided",
    correlation_id: str | None = "x-1",
    **filter_condition: Any,
) -> EventSubscription:
    return EventSubscription(
        subscription_id=subscription_id,
        event_type=event_type,
        execution_id="x-1",
        flow_id="approvals",
        node_id="wait",
        created_at_ms=1_760_000_000_000,
        correlation_id=correlation_id,
        filter_condition=filter_condition,
    )


async def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {BOUND_S} s: {what}")
        await asyncio.sleep(0.01)


async def no_sleep(seconds: float) -> None:
    """Retries in these tests do not wait."""


class Recorder:
    """An async handler that records the ids of the events it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, received: Event) -> None:
        self.seen.append(received.event_id)


class Resource:
    """Something the bus owns; ``failures`` first releases raise."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.attempts = 0
        self.released = False

    async def aclose(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionError(f"release attempt {self.attempts} failed")
        self.released = True


class EventBusContract:
    @pytest.fixture
    def make_bus(self) -> MakeBus:
        """Builds a bus with the given options (sleep, drain_timeout_s, resources)."""
        raise NotImplementedError

    @pytest.fixture
    async def build(self, make_bus: MakeBus) -> AsyncIterator[MakeBus]:
        """``make_bus`` that never sleeps on retries and closes every bus after the test."""
        built: list[InspectableBus] = []

        def build(**options: Any) -> InspectableBus:
            options.setdefault("sleep", no_sleep)
            options.setdefault("drain_timeout_s", 0.5)
            bus = make_bus(**options)
            built.append(bus)
            return bus

        yield build
        for bus in built:
            try:
                await asyncio.wait_for(bus.close(), BOUND_S)
            except EventBusCloseError:
                await asyncio.wait_for(bus.close(), BOUND_S)

    @pytest.fixture
    async def bus(self, build: MakeBus) -> InspectableBus:
        bus = build()
        await bus.start()
        return bus

    # --- publish and handlers ---------------------------------------------------------

    async def test_a_published_event_reaches_a_matching_handler(self, bus: InspectableBus) -> None:
        received: list[Event] = []

        async def on_user(published: Event) -> None:
            received.append(published)

        bus.register_handler("user.created", on_user)
        await bus.publish(event())

        await eventually(lambda: len(received) == 1, "the handler ran")
        assert received == [event()]

    async def test_handlers_match_event_types_with_fnmatch_patterns(
        self, bus: InspectableBus
    ) -> None:
        users, everything = Recorder(), Recorder()
        bus.register_handler("user.*", users, handler_id="users")
        bus.register_handler("*", everything, handler_id="everything")

        await bus.publish(event("ev-order", "order.paid"))
        await bus.publish(event("ev-user", "user.created"))
        await bus.publish(event("ev-upper", "User.created"))

        await eventually(lambda: len(everything.seen) == 3, "the catch-all saw every event")
        await eventually(lambda: not bus.dispatcher.in_flight(), "dispatches settled")
        assert users.seen == ["ev-user"]

    async def test_sync_and_async_handlers_both_run(self, bus: InspectableBus) -> None:
        seen: list[str] = []

        def sync_handler(published: Event) -> None:
            seen.append("sync")

        async def async_handler(published: Event) -> None:
            seen.append("async")

        bus.register_handler("user.*", sync_handler)
        bus.register_handler("user.*", async_handler)
        await bus.publish(event())

        await eventually(lambda: sorted(seen) == ["async", "sync"], "both handlers ran")

    async def test_a_republished_event_does_not_rerun_a_handler_that_succeeded(
        self, bus: InspectableBus
    ) -> None:
        handler = Recorder()
        bus.register_handler("user.*", handler, handler_id="h")
        await bus.publish(event("ev-1"))
        await eventually(lambda: handler.seen == ["ev-1"], "the first publish was handled")

        await bus.publish(event("ev-1"))
        await bus.publish(event("ev-2"))  # delivered after the duplicate: a barrier

        await eventually(lambda: "ev-2" in handler.seen, "the barrier event was handled")
        await eventually(lambda: not bus.dispatcher.in_flight(), "dispatches settled")
        assert handler.seen == ["ev-1", "ev-2"]

    async def test_a_republished_event_whose_handler_gave_up_runs_it_again(
        self, bus: InspectableBus
    ) -> None:
        calls: list[str] = []

        async def fails_the_first_time(published: Event) -> None:
            calls.append(published.event_id)
            if len(calls) == 1:
                raise RuntimeError("downstream was down")

        bus.register_handler(
            "user.*", fails_the_first_time, handler_id="h", retry=RetryPolicy(max_retries=0)
        )
        failures = bus.dispatcher.failures
        await bus.publish(event("ev-1"))
        await eventually(lambda: len(failures) == 1, "the handler gave up")
        assert failures[0].outcome is HandlerOutcome.GAVE_UP

        await bus.publish(event("ev-1"))

        await eventually(lambda: calls == ["ev-1", "ev-1"], "the re-publish ran the handler")

    async def test_handlers_declared_with_the_decorator_are_registered_from_an_iterable(
        self, bus: InspectableBus
    ) -> None:
        from plaita.application.event_bus import event_handler

        seen: list[str] = []

        @event_handler("user.*", handler_id="declared")
        async def declared(published: Event) -> None:
            seen.append(published.event_id)

        assert bus.register_handlers_from([declared]) == ["declared"]
        await bus.publish(event())

        await eventually(lambda: seen == ["ev-1"], "the declared handler ran")

    # --- events and subscriptions -------------------------------------------------------

    async def test_get_event_returns_a_published_event_and_none_for_an_unknown_id(
        self, bus: InspectableBus
    ) -> None:
        await bus.publish(event("ev-1", correlation_id="x-1"))

        assert await bus.get_event("ev-1") == event("ev-1", correlation_id="x-1")
        assert await bus.get_event("ev-unknown") is None

    async def test_a_registered_subscription_can_be_unregistered_once(
        self, bus: InspectableBus
    ) -> None:
        await bus.register_subscription(subscription())

        assert await bus.unregister_subscription("sub-1") is True
        assert await bus.unregister_subscription("sub-1") is False

    async def test_wait_for_event_receives_a_matching_event_published_while_it_waits(
        self, bus: InspectableBus
    ) -> None:
        waiting = asyncio.create_task(
            bus.wait_for_event(subscription(approved=True), timeout_ms=int(BOUND_S * 1000))
        )
        await asyncio.sleep(0.05)  # let the wait register; the result must not depend on it
        await bus.publish(event("ev-no", "approval.decided", "x-1", approved=False))
        await bus.publish(event("ev-other", "approval.decided", "x-2", approved=True))
        await bus.publish(event("ev-yes", "approval.decided", "x-1", approved=True))

        received = await asyncio.wait_for(waiting, BOUND_S)

        assert received is not None and received.event_id == "ev-yes"

    async def test_an_event_published_before_the_wait_is_not_lost(
        self, bus: InspectableBus
    ) -> None:
        """V6: the event waits in its correlation's inbox."""
        await bus.publish(event("ev-early", "approval.decided", "x-1", approved=True))

        received = await bus.wait_for_event(subscription(), timeout_ms=int(BOUND_S * 1000))

        assert received is not None and received.event_id == "ev-early"

    async def test_wait_for_event_returns_none_once_its_timeout_passed(
        self, bus: InspectableBus
    ) -> None:
        await bus.publish(event("ev-other", "approval.decided", "x-2"))
        started = time.monotonic()

        assert await bus.wait_for_event(subscription(), timeout_ms=50) is None
        assert time.monotonic() - started < BOUND_S

    # --- publish_sync -------------------------------------------------------------------

    async def test_publish_sync_from_a_worker_thread_publishes_on_the_bus_loop(
        self, bus: InspectableBus
    ) -> None:
        handler = Recorder()
        bus.register_handler("user.*", handler)

        await asyncio.wait_for(asyncio.to_thread(bus.publish_sync, event("ev-sync")), BOUND_S)

        await eventually(lambda: handler.seen == ["ev-sync"], "the handler ran")
        assert await bus.get_event("ev-sync") == event("ev-sync")

    async def test_publish_sync_on_the_loop_thread_is_refused_with_a_named_error(
        self, bus: InspectableBus
    ) -> None:
        with pytest.raises(PublishSyncInLoopError, match=r"await bus\.publish"):
            bus.publish_sync(event("ev-sync"))
        assert await bus.get_event("ev-sync") is None

    # --- close() (V9) -------------------------------------------------------------------

    async def test_close_is_idempotent_and_releases_owned_resources_once(
        self, build: MakeBus
    ) -> None:
        resource = Resource()
        bus = build(resources=[resource])
        await bus.start()

        await bus.close()
        await bus.close()
        await asyncio.gather(bus.close(), bus.close())

        assert (resource.attempts, resource.released) == (1, True)

    async def test_concurrent_closes_share_one_teardown(self, build: MakeBus) -> None:
        resource = Resource()
        bus = build(resources=[resource])
        await bus.start()

        await asyncio.wait_for(asyncio.gather(bus.close(), bus.close(), bus.close()), BOUND_S)

        assert resource.attempts == 1

    async def test_close_waits_a_bounded_time_and_names_a_straggler_without_cancelling_it(
        self, build: MakeBus, caplog: pytest.LogCaptureFixture
    ) -> None:
        bus = build(drain_timeout_s=0.05)
        await bus.start()
        release = asyncio.Event()
        progress: list[str] = []

        async def slow(published: Event) -> None:
            progress.append("started")
            await release.wait()
            progress.append("finished")

        bus.register_handler("user.*", slow, handler_id="slow-mailer")
        await bus.publish(event("ev-slow"))
        await eventually(lambda: progress == ["started"], "the handler started")

        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            await asyncio.wait_for(bus.close(), BOUND_S)

        assert time.monotonic() - started < 2.0
        assert (
            "event=event_bus.dispatch_straggler during=close event_id=ev-slow "
            "handler_id=slow-mailer"
        ) in caplog.text
        release.set()
        await eventually(lambda: progress == ["started", "finished"], "the straggler finished")

    async def test_close_waits_for_a_dispatch_that_finishes_within_the_bound(
        self, build: MakeBus, caplog: pytest.LogCaptureFixture
    ) -> None:
        bus = build(drain_timeout_s=BOUND_S)
        await bus.start()
        progress: list[str] = []

        async def brief(published: Event) -> None:
            progress.append("started")
            await asyncio.sleep(0.05)
            progress.append("finished")

        bus.register_handler("user.*", brief)
        await bus.publish(event())
        await eventually(lambda: progress == ["started"], "the handler started")

        with caplog.at_level(logging.WARNING, logger=LOGGER):
            await asyncio.wait_for(bus.close(), BOUND_S)

        assert progress == ["started", "finished"]
        assert "dispatch_straggler" not in caplog.text

    async def test_close_stops_the_listeners(self, bus: InspectableBus) -> None:
        await bus.close()

        assert bus.listening is False

    async def test_everything_but_close_is_refused_after_close(self, bus: InspectableBus) -> None:
        await bus.close()

        with pytest.raises(EventBusClosedError, match="publish of event 'ev-1'"):
            await bus.publish(event())
        with pytest.raises(EventBusClosedError):
            await bus.wait_for_event(subscription(), timeout_ms=10)
        with pytest.raises(EventBusClosedError):
            await bus.register_subscription(subscription())
        with pytest.raises(EventBusClosedError):
            bus.register_handler("user.*", Recorder())
        with pytest.raises(EventBusClosedError):
            await bus.get_event("ev-1")

    async def test_a_wait_in_progress_ends_with_a_named_error_when_the_bus_closes(
        self, bus: InspectableBus
    ) -> None:
        waiting = asyncio.create_task(bus.wait_for_event(subscription(), timeout_ms=None))
        await asyncio.sleep(0.05)

        await asyncio.wait_for(bus.close(), BOUND_S)

        with pytest.raises(EventBusClosedError, match="sub-1"):
            await asyncio.wait_for(waiting, BOUND_S)

    async def test_close_from_inside_one_of_its_handlers_is_refused(
        self, bus: InspectableBus
    ) -> None:
        outcomes: list[BaseException | None] = []

        async def closes_its_bus(published: Event) -> None:
            try:
                await bus.close()
            except CloseFromHandlerError as refused:
                outcomes.append(refused)
            else:
                outcomes.append(None)

        bus.register_handler("user.*", closes_its_bus)
        await bus.publish(event())

        await eventually(lambda: len(outcomes) == 1, "the handler tried to close")
        assert isinstance(outcomes[0], CloseFromHandlerError)
        await bus.publish(event("ev-2"))  # still open
        await eventually(lambda: len(outcomes) == 2, "the bus still dispatches")

    async def test_a_failed_teardown_raises_a_named_error_and_a_later_close_retries_it(
        self, build: MakeBus
    ) -> None:
        flaky, steady = Resource(failures=1), Resource()
        bus = build(resources=[flaky, steady])
        await bus.start()

        with pytest.raises(EventBusCloseError, match=r"release\[0\]:Resource.*close\(\) again"):
            await bus.close()
        with pytest.raises(EventBusClosedError):
            await bus.publish(event())  # closing already refuses new work

        await bus.close()
        await bus.close()

        assert (flaky.attempts, flaky.released) == (2, True)
        assert (steady.attempts, steady.released) == (1, True)


class TestMemoryEventBus(EventBusContract):
    @pytest.fixture
    def make_bus(self) -> MakeBus:
        return MemoryEventBus

    def test_publish_sync_without_any_loop_runs_the_handlers_before_it_returns(self) -> None:
        """#218: the private loop would drop a dispatch still running when it ends."""
        bus = MemoryEventBus(sleep=no_sleep)
        seen: list[str] = []

        async def handler(published: Event) -> None:
            await asyncio.sleep(0.01)
            seen.append(published.event_id)

        bus.register_handler("user.*", handler)

        bus.publish_sync(event("ev-sync"))

        assert seen == ["ev-sync"]


def redis_bus(
    client: redis.Redis, keys: RedisKeys, partitions: int = 1, **options: Any
) -> RedisEventBus:
    options.setdefault("listener_block_ms", 200)
    options.setdefault("events", RedisEventLog(client, keys, partitions=partitions))
    return RedisEventBus(
        client,
        keys,
        subscriptions=RedisSubscriptionStore(client, keys),
        inbox=RedisInbox(client, keys),
        partitions=partitions,
        **options,
    )


class XreadSpy:
    """Counts the XREADs open on a client, per stream, and how many streams each names."""

    def __init__(self, client: redis.Redis) -> None:
        self.open: dict[str, int] = {}
        self.most_open: dict[str, int] = {}
        self.streams_per_read: set[int] = set()
        self._client = client
        original = client.execute_command

        async def spy(*args: Any, **options: Any) -> Any:
            if str(args[0]).upper() != "XREAD":
                return await original(*args, **options)
            words = [str(arg) for arg in args]
            named = words[words.index("STREAMS") + 1 :]
            self.streams_per_read.add(len(named) // 2)
            stream = named[0]
            self.open[stream] = self.open.get(stream, 0) + 1
            self.most_open[stream] = max(self.most_open.get(stream, 0), self.open[stream])
            try:
                return await original(*args, **options)
            finally:
                self.open[stream] -= 1
                if not self.open[stream]:
                    del self.open[stream]

        client.execute_command = spy  # type: ignore[method-assign]

    def stop(self) -> None:
        del self._client.execute_command  # the class's own again


class OneUnreadableRecord(RedisEventLog):
    """An event log whose record of ``bad_id`` cannot be decoded (a foreign tool wrote it)."""

    bad_id = "ev-bad"

    async def get(self, event_id: str) -> Event | None:
        if event_id == self.bad_id:
            raise ValueError("record is not event JSON")
        return await super().get(event_id)


class RedisOnlyChecks:
    @pytest.fixture(params=[1, 3], ids=["p1", "p3"])
    def partitions(self, request: pytest.FixtureRequest) -> int:
        return int(request.param)

    async def test_the_listener_runs_once_started(self, bus: InspectableBus) -> None:
        assert bus.listening is True

    async def test_events_appended_by_another_bus_reach_this_buses_handlers(
        self, build: MakeBus
    ) -> None:
        listening, publishing = build(), build()
        handler = Recorder()
        listening.register_handler("user.*", handler)
        await listening.start()

        await publishing.publish(event("ev-remote"))

        await eventually(lambda: handler.seen == ["ev-remote"], "the other bus's handler ran")

    async def test_an_unreadable_record_is_named_and_skipped_and_later_events_still_arrive(
        self,
        build: MakeBus,
        redis_client: redis.Redis,
        keys: RedisKeys,
        partitions: int,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        bus = build(events=OneUnreadableRecord(redis_client, keys, partitions=partitions))
        handler = Recorder()
        bus.register_handler("user.*", handler)
        await bus.start()

        with caplog.at_level(logging.ERROR, logger=LOGGER):
            await bus.publish(event("ev-bad"))
            await bus.publish(event("ev-good"))
            await eventually(lambda: handler.seen == ["ev-good"], "the later event arrived")

        assert "event=event_bus.notification_failed event_id=ev-bad" in caplog.text
        assert bus.listening is True

    async def test_a_non_utf8_notification_does_not_stop_the_listener(
        self, build: MakeBus, redis_client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> None:
        """R4, V3: a foreign non-UTF-8 entry on the notification stream used to fail every
        read of the listener, for ever; now it names no event and the next one arrives."""
        bus = build()
        handler = Recorder()
        bus.register_handler("user.*", handler)
        await bus.start()

        where = None if partitions == 1 else partition_of("ev-after", partitions)
        await redis_client.xadd(keys.event_notifications(where), {"event_id": b"\xff\xfe"})
        await bus.publish(event("ev-after"))

        await eventually(lambda: handler.seen == ["ev-after"], "the later event arrived")
        assert bus.listening is True

    async def test_the_listener_holds_one_blocking_xread_per_partition(
        self, build: MakeBus, redis_client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> None:
        """K3: each partition is its own hash tag, so the listener is one blocking XREAD of
        one stream per partition, side by side (never one XREAD of several streams, which a
        cluster refuses across slots); an event on any partition reaches the handlers."""
        reads = XreadSpy(redis_client)
        bus = build()
        handler = Recorder()
        bus.register_handler("user.*", handler)
        try:
            await bus.start()
            streams = {
                keys.event_notifications(None if partitions == 1 else k) for k in range(partitions)
            }
            await eventually(lambda: set(reads.open) == streams, "a read open per partition")
            ids = [
                next(f"ev-{i}" for i in range(100) if partition_of(f"ev-{i}", partitions) == k)
                for k in range(partitions)
            ]
            for event_id in ids:
                await bus.publish(event(event_id))
            await eventually(lambda: sorted(handler.seen) == sorted(ids), "every partition's")
        finally:
            reads.stop()
        assert reads.most_open == dict.fromkeys(streams, 1)
        assert reads.streams_per_read == {1}

    async def test_a_handled_mark_is_written_only_after_success(
        self, build: MakeBus, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        bus = build()
        await bus.start()
        failures = bus.dispatcher.failures

        async def fails(published: Event) -> None:
            raise RuntimeError("no")

        bus.register_handler("user.*", fails, handler_id="h", retry=RetryPolicy(max_retries=0))
        await bus.publish(event())
        await eventually(lambda: len(failures) == 1, "the handler gave up")
        assert await redis_client.exists(keys.event_handled("ev-1", "h")) == 0

        bus.unregister_handler("h")
        bus.register_handler("user.*", Recorder(), handler_id="h")
        await bus.publish(event())

        async def marked() -> int:
            return int(await redis_client.exists(keys.event_handled("ev-1", "h")))

        deadline = time.monotonic() + BOUND_S
        while not await marked():
            assert time.monotonic() < deadline, "the mark was not written"
            await asyncio.sleep(0.01)
        assert 0 < await redis_client.ttl(keys.event_handled("ev-1", "h")) <= 7 * 24 * 3600


class TestFakeRedisEventBus(RedisOnlyChecks, EventBusContract):
    @pytest.fixture
    def redis_client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis

    @pytest.fixture
    def make_bus(self, fake_redis: redis.Redis, keys: RedisKeys, partitions: int) -> MakeBus:
        return lambda **options: redis_bus(fake_redis, keys, partitions, **options)


@pytest.mark.redis
class TestRedisEventBus(RedisOnlyChecks, EventBusContract):
    @pytest.fixture
    def redis_client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis

    @pytest.fixture
    def make_bus(self, real_redis: redis.Redis, keys: RedisKeys, partitions: int) -> MakeBus:
        return lambda **options: redis_bus(real_redis, keys, partitions, **options)

    @staticmethod
    async def connections_named(client: redis.Redis, name: str) -> int:
        """Connections of that name to the Redis (on a cluster: to any of its nodes)."""
        if isinstance(client, redis.RedisCluster):
            await client.initialize()  # a client that sent nothing yet knows no node
            listed = [
                connection
                for node in client.get_nodes()
                for connection in await client.client_list(target_nodes=node)
            ]
        else:
            listed = await client.client_list()
        return sum(1 for connection in listed if connection.get("name") == name)

    async def test_close_closes_an_owned_client_and_its_pool(
        self, real_redis: redis.Redis, keys: RedisKeys, redis_topology: str, partitions: int
    ) -> None:
        """V9: the owned client's pool is closed (on a cluster: every node's)."""
        name = f"plaita-bus-{uuid.uuid4().hex[:12]}"
        owned = real_redis_client(redis_topology, decode_responses=False, client_name=name)
        bus = redis_bus(owned, keys, partitions, owns_client=True, sleep=no_sleep)
        await bus.start()
        await bus.publish(event())
        assert await self.connections_named(real_redis, name) >= 1

        await asyncio.wait_for(bus.close(), BOUND_S)

        assert await self.connections_named(real_redis, name) == 0

    async def test_close_leaves_a_client_it_does_not_own_open(
        self, real_redis: redis.Redis, keys: RedisKeys, redis_topology: str, partitions: int
    ) -> None:
        name = f"plaita-bus-{uuid.uuid4().hex[:12]}"
        shared = real_redis_client(redis_topology, decode_responses=False, client_name=name)
        try:
            bus = redis_bus(shared, keys, partitions, sleep=no_sleep)
            await bus.start()
            await bus.publish(event())

            await asyncio.wait_for(bus.close(), BOUND_S)

            assert await self.connections_named(real_redis, name) >= 1
        finally:
            await shared.aclose()


@pytest.mark.redis
def test_redis_publish_sync_without_any_loop_leaves_the_client_usable_on_the_next_loop(
    redis_topology: str,
) -> None:
    """A private loop's connections die with it; the bus drops them so the next loop's
    commands open fresh ones instead of failing with "Event loop is closed" (on a cluster:
    every node's, and the client maps the slots again)."""
    keys = RedisKeys(f"plaita-test-{uuid.uuid4().hex}")
    client = real_redis_client(redis_topology, decode_responses=False)
    bus = redis_bus(client, keys, owns_client=True)

    bus.publish_sync(event("ev-sync"))

    async def afterwards() -> Event | None:
        try:
            return await bus.get_event("ev-sync")
        finally:
            created = [key async for key in client.scan_iter(match=f"{keys.namespace}:*")]
            if created:
                await client.delete(*created)
            await bus.close()

    assert asyncio.run(afterwards()) == event("ev-sync")
