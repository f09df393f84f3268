"""EventLog contract (V1, V3), run against every adapter family.

The Redis families run it with one notification partition and with three (``--partitions``);
the events whose notifications are compared in order (``ev:1``, ``ev:2``, ``ev:4``) land on
one partition of three, as one execution's carriers do in the task queue's suite.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text_fields
from plaita.application.ports import Clock, EventLog
from plaita.domain.events import Event, EventQuery
from plaita.domain.partitions import partition_of

Elapse = Callable[[int], Awaitable[None]]
Reopen = Callable[[EventLog], EventLog]
StreamOf = Callable[[str], str]
SEVEN_DAYS_MS = 7 * 24 * 60 * 60 * 1000


def event(event_id: str = "ev:1", event_type: str = "payment.received") -> Event:
    return Event(
        event_id=event_id,
        event_type=event_type,
        timestamp_ms=1_760_000_000_000,
        data={"order": 7, "lines": [{"sku": "A", "qty": 2}]},
        correlation_id="order-7",
        source="shop",
        tenant_id="acme",
    )


def event_ids(notifications: object) -> list[str]:
    return [n.event_id for n in notifications]  # type: ignore[attr-defined]


class EventLogContract:
    @pytest.fixture
    def log(self) -> EventLog:
        raise NotImplementedError

    @pytest.fixture
    def reopen(self) -> Reopen:
        """A second adapter over the same store, as a restarted event filter opens it."""
        raise NotImplementedError

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    @pytest.fixture
    async def ready(self, log: EventLog) -> EventLog:
        await log.ensure_group()
        return log

    async def test_appended_event_round_trips(self, ready: EventLog) -> None:
        appended = event()
        await ready.append(appended)

        assert await ready.get("ev:1") == appended

    async def test_get_of_an_unknown_id_is_none(self, ready: EventLog) -> None:
        assert await ready.get("ev:none") is None

    async def test_append_notifies_the_event_filters(self, ready: EventLog) -> None:
        await ready.append(event("ev:1"))
        await ready.append(event("ev:2", "payment.refunded"))

        notifications = await ready.read_notifications("filter-a", count=10, block_ms=0)

        assert event_ids(notifications) == ["ev:1", "ev:2"]
        for notification in notifications:
            await ready.ack_notification(notification.notification_id)
        assert await ready.read_notifications("filter-a", count=10, block_ms=0) == []

    async def test_each_notification_goes_to_one_filter_of_the_group(self, ready: EventLog) -> None:
        await ready.append(event("ev:1"))
        await ready.append(event("ev:2"))

        first = await ready.read_notifications("filter-a", count=1, block_ms=0)
        second = await ready.read_notifications("filter-b", count=10, block_ms=0)

        assert (event_ids(first), event_ids(second)) == (["ev:1"], ["ev:2"])

    async def test_group_starts_at_zero_so_earlier_notifications_arrive(
        self, log: EventLog
    ) -> None:
        await log.append(event("ev:1"))
        await log.ensure_group()
        await log.ensure_group()  # idempotent

        assert event_ids(await log.read_notifications("filter-a", count=10, block_ms=0)) == ["ev:1"]

    async def test_read_waits_block_ms_then_returns_empty(self, ready: EventLog) -> None:
        started = time.monotonic()
        assert await ready.read_notifications("filter-a", count=10, block_ms=100) == []
        assert 0.08 <= time.monotonic() - started < 2

    async def test_blocked_read_returns_as_soon_as_an_event_arrives(self, ready: EventLog) -> None:
        await ready.read_notifications("filter-a", count=10, block_ms=0)
        reading = asyncio.create_task(
            ready.read_notifications("filter-a", count=10, block_ms=5_000)
        )
        await asyncio.sleep(0.05)
        await ready.append(event("ev:1"))

        assert event_ids(await asyncio.wait_for(reading, timeout=2)) == ["ev:1"]

    async def test_restarted_filter_first_gets_its_own_pending_notifications(
        self, ready: EventLog, reopen: Reopen
    ) -> None:
        """V3: a notification read but not acked before a restart is handled after it."""
        await ready.append(event("ev:1"))
        await ready.read_notifications("filter-a", count=10, block_ms=0)
        await ready.append(event("ev:2"))

        restarted = reopen(ready)
        [backlog] = await restarted.read_notifications("filter-a", count=10, block_ms=0)
        assert backlog.event_id == "ev:1"
        await restarted.ack_notification(backlog.notification_id)

        assert event_ids(await restarted.read_notifications("filter-a", count=10, block_ms=0)) == [
            "ev:2"
        ]

    async def test_unacked_notifications_are_not_redelivered_to_a_running_filter(
        self, ready: EventLog
    ) -> None:
        await ready.append(event("ev:1"))
        await ready.read_notifications("filter-a", count=10, block_ms=0)

        assert await ready.read_notifications("filter-a", count=10, block_ms=0) == []

    async def test_reclaim_takes_notifications_of_a_crashed_filter(
        self, ready: EventLog, elapse: Elapse
    ) -> None:
        """V3: notifications left pending by a crashed filter are taken over after min_idle."""
        await ready.append(event("ev:1"))
        [pending] = await ready.read_notifications("crashed", count=10, block_ms=0)
        await elapse(150)

        [reclaimed] = await ready.reclaim_notifications("rescuer", min_idle_ms=100, count=10)

        assert reclaimed == pending
        await ready.ack_notification(reclaimed.notification_id)
        assert await ready.reclaim_notifications("rescuer", min_idle_ms=0, count=10) == []

    async def test_reclaim_leaves_notifications_younger_than_min_idle(
        self, ready: EventLog
    ) -> None:
        await ready.append(event("ev:1"))
        await ready.read_notifications("busy", count=10, block_ms=0)

        assert await ready.reclaim_notifications("rescuer", min_idle_ms=60_000, count=10) == []


class TestMemoryEventLog(EventLogContract):
    @pytest.fixture
    def log(self, clock: Clock) -> EventLog:
        return MemoryEventLog(clock)

    @pytest.fixture
    def reopen(self) -> Reopen:
        return lambda log: log.restarted()  # type: ignore[attr-defined]

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock

    async def test_event_record_expires_after_seven_days(
        self, ready: EventLog, elapse: Elapse
    ) -> None:
        await ready.append(event())
        await elapse(SEVEN_DAYS_MS - 1)
        assert await ready.get("ev:1") is not None

        await elapse(1)
        assert await ready.get("ev:1") is None


class RedisEventKeyChecks:
    """Redis only: record TTL and type index follow the key schema; foreign entries on the
    notification stream are survived."""

    @pytest.fixture
    def stream_of(self, keys: RedisKeys, partitions: int) -> StreamOf:
        """The notification stream (partition) an event's notification goes to."""
        return lambda event_id: keys.event_notifications(
            None if partitions == 1 else partition_of(event_id, partitions)
        )

    async def test_foreign_notifications_never_fail_a_read_or_a_reclaim(
        self, ready: EventLog, redis_client: redis.Redis, stream_of: StreamOf, elapse: Elapse
    ) -> None:
        """R4, V4: a non-UTF-8 entry (or one naming no event) is handed on like any other,
        so its lookup finds nothing and it is acked; the events around it still arrive."""
        stream = stream_of("ev:1")  # the partition of ev:4 too
        await ready.append(event("ev:1"))
        await redis_client.xadd(stream, {"event_id": b"\xff\xfe"})
        await redis_client.xadd(stream, {"something": "else"})
        await ready.append(event("ev:4"))

        read = await ready.read_notifications("crashed", count=10, block_ms=0)
        assert event_ids(read) == ["ev:1", "\ufffd\ufffd", "", "ev:4"]
        await elapse(60)

        reclaimed = await ready.reclaim_notifications("rescuer", min_idle_ms=50, count=10)
        assert event_ids(reclaimed) == event_ids(read)
        for notification in reclaimed:
            await ready.ack_notification(notification.notification_id)
        assert await ready.reclaim_notifications("rescuer", min_idle_ms=0, count=10) == []

    async def test_a_failed_record_step_writes_no_notification_and_a_retry_stores_once(
        self, log: EventLog, redis_client: redis.Redis, keys: RedisKeys, stream_of: StreamOf
    ) -> None:
        """An append is two steps (one slot each on a cluster has no shared MULTI): record
        and indexes, then the notification. When the first fails the publisher gets the
        error and no event filter hears of the event; the same append again stores it and
        notifies once."""
        broken = keys.events_by_time()
        await redis_client.set(broken, "not a sorted set")  # its ZADD fails: WRONGTYPE

        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await log.append(event())
        assert await redis_client.exists(stream_of("ev:1")) == 0

        await redis_client.delete(broken)
        await log.append(event())
        await log.ensure_group()
        assert event_ids(await log.read_notifications("filter-a", count=10, block_ms=0)) == ["ev:1"]
        assert await log.get("ev:1") == event()
        assert await redis_client.zscore(broken, "ev:1") == event().timestamp_ms

    async def test_a_failed_notification_step_leaves_the_event_stored_and_indexed(
        self, log: EventLog, redis_client: redis.Redis, stream_of: StreamOf
    ) -> None:
        """A crash after the first step loses nothing: the record and its time index entry
        are there for the reconciler's re-scan (V5), and the retried append notifies."""
        stream = stream_of("ev:1")
        await redis_client.set(stream, "not a stream")  # its XADD fails: WRONGTYPE

        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await log.append(event())
        assert await log.get("ev:1") == event()
        assert await log.list(EventQuery(limit=10)) == [event()]

        await redis_client.delete(stream)
        await log.append(event())
        await log.ensure_group()
        assert event_ids(await log.read_notifications("filter-a", count=10, block_ms=0)) == ["ev:1"]

    async def test_record_has_a_seven_day_ttl_and_a_type_index_entry(
        self, ready: EventLog, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        await ready.append(event())

        ttl_ms = await redis_client.pttl(keys.event("ev:1"))
        assert SEVEN_DAYS_MS - 60_000 < ttl_ms <= SEVEN_DAYS_MS
        score = await redis_client.zscore(keys.events_by_type("payment.received"), "ev:1")
        assert score == event().timestamp_ms


class RedisEventLogFamily(EventLogContract, RedisEventKeyChecks):
    """The contract and the key checks with one notification partition and with three."""

    @pytest.fixture(params=[1, 3], ids=["p1", "p3"])
    def partitions(self, request: pytest.FixtureRequest) -> int:
        return int(request.param)

    @pytest.fixture
    async def opened(self) -> AsyncIterator[list[RedisEventLog]]:
        """Every log a test opens, closed after it (their open reads cancelled)."""
        logs: list[RedisEventLog] = []
        yield logs
        for log in logs:
            await log.close()

    @pytest.fixture
    def log(
        self,
        redis_client: redis.Redis,
        keys: RedisKeys,
        partitions: int,
        opened: list[RedisEventLog],
    ) -> EventLog:
        opened.append(RedisEventLog(redis_client, keys, partitions=partitions))
        return opened[-1]

    @pytest.fixture
    def reopen(
        self,
        redis_client: redis.Redis,
        keys: RedisKeys,
        partitions: int,
        opened: list[RedisEventLog],
    ) -> Reopen:
        def reopen(_log: EventLog) -> EventLog:
            opened.append(RedisEventLog(redis_client, keys, partitions=partitions))
            return opened[-1]

        return reopen


class NotificationPartitionChecks:
    """K3, three partitions only: where a notification goes and how a filter reads them."""

    P = 3

    @pytest.fixture
    async def partitioned(
        self, redis_client: redis.Redis, keys: RedisKeys
    ) -> AsyncIterator[RedisEventLog]:
        log = RedisEventLog(redis_client, keys, partitions=self.P)
        await log.ensure_group()
        yield log
        await log.close()

    async def test_a_notification_lands_on_its_events_partition_only(
        self, partitioned: RedisEventLog, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        for n in range(12):
            await partitioned.append(event(f"ev:{n}"))

        for k in range(self.P):
            entries = await redis_client.xrange(keys.event_notifications(k))
            named = [text_fields(fields)["event_id"] for _id, fields in entries]
            expected = [f"ev:{n}" for n in range(12) if partition_of(f"ev:{n}", self.P) == k]
            assert named == expected
        assert await redis_client.exists(keys.event_notifications()) == 0

    async def test_ack_and_reclaim_find_the_partition_from_the_notification_id(
        self, partitioned: RedisEventLog, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        ids = [f"ev:{n}" for n in range(12)]
        for event_id in ids:
            await partitioned.append(event(event_id))
        read = await partitioned.read_notifications("crashed", count=20, block_ms=0)
        assert sorted(event_ids(read)) == sorted(ids)
        assert len({n.notification_id for n in read}) == len(ids)

        reclaimed = await partitioned.reclaim_notifications("rescuer", min_idle_ms=0, count=20)
        assert sorted(event_ids(reclaimed)) == sorted(ids)
        for notification in reclaimed:
            await partitioned.ack_notification(notification.notification_id)
        for k in range(self.P):
            summary = await redis_client.xpending(
                keys.event_notifications(k), "plaita-event-filter"
            )
            assert summary["pending"] == 0

    async def test_a_filter_holds_one_blocking_read_per_partition(
        self, partitioned: RedisEventLog, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        """A notification on any partition is read at once; an idle filter keeps one
        blocking XREADGROUP open per partition, never more, never a polling loop."""
        reads = GroupReadSpy(redis_client)
        try:
            await partitioned.read_notifications("filter-a", count=10, block_ms=0)  # backlog
            reading = asyncio.create_task(
                partitioned.read_notifications("filter-a", count=10, block_ms=5_000)
            )
            streams = {keys.event_notifications(k) for k in range(self.P)}
            for _ in range(200):
                if set(reads.open) == streams:
                    break
                await asyncio.sleep(0.01)
            assert set(reads.open) == streams
            late = next(f"ev:{n}" for n in range(50) if partition_of(f"ev:{n}", self.P) == 1)
            await partitioned.append(event(late))

            assert event_ids(await asyncio.wait_for(reading, timeout=2)) == [late]
        finally:
            reads.stop()
        assert reads.most_open == dict.fromkeys(streams, 1)
        assert reads.blocking <= self.P


class GroupReadSpy:
    """Counts the blocking XREADGROUPs open on a client, per stream."""

    def __init__(self, client: redis.Redis) -> None:
        self.open: dict[str, int] = {}
        self.most_open: dict[str, int] = {}
        self.blocking = 0
        self._client = client
        original = client.execute_command

        async def spy(*args: Any, **options: Any) -> Any:
            words = [str(arg) for arg in args]
            if words[0].upper() != "XREADGROUP" or "BLOCK" not in words:
                return await original(*args, **options)
            self.blocking += 1
            stream = words[words.index("STREAMS") + 1]
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


class TestFakeRedisEventLog(RedisEventLogFamily):
    @pytest.fixture
    def redis_client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisEventLog(RedisEventLogFamily):
    @pytest.fixture
    def redis_client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


class TestFakeRedisNotificationPartitions(NotificationPartitionChecks):
    @pytest.fixture
    def redis_client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisNotificationPartitions(NotificationPartitionChecks):
    @pytest.fixture
    def redis_client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
