"""Stream trimming contract (S5): the task stream and the event notification stream lose
only entries below the oldest one a consumer group still needs — never a pending entry,
never one not yet delivered. Run on memory, fakeredis (bytes and str) and real Redis; the
Redis notification families with one partition and with three (``--partitions``), whose
events here land on one partition (``ONE_PARTITION``) so their order is the stream's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.application.ports import Clock, EventLog, TaskQueue
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.events import Event
from plaita.domain.partitions import partition_of
from plaita.domain.priorities import PRIORITIES

Elapse = Callable[[int], Awaitable[None]]
#: Short enough for the Redis families, which wait in real time.
MIN_AGE_MS = 300
#: Event ids whose notifications land on one partition of three.
ONE_PARTITION = [f"ev-{i}" for i in range(100) if partition_of(f"ev-{i}", 3) == 0][:4]


def carrier(n: int) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=f"x-{n}",
        flow_id="orders",
        version="1",
        params={},
        now_ms=1_760_000_000_000,
        generations=LEGACY_GENERATIONS,
    )


def event(n: int, event_id: str | None = None) -> Event:
    return Event(
        event_id=ONE_PARTITION[n] if event_id is None else event_id,
        event_type="paid",
        timestamp_ms=1_760_000_000_000,
        data={},
        correlation_id=f"c-{n}",
        source="test",
    )


class QueueTrimContract:
    @pytest.fixture
    def queue(self) -> TaskQueue:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    @pytest.fixture
    async def ready(self, queue: TaskQueue) -> TaskQueue:
        await queue.ensure_group()
        return queue

    async def _delivered(self, queue: TaskQueue, count: int) -> list[str]:
        for n in range(count):
            await queue.enqueue(carrier(n))
        return [d.message_id for d in await queue.read("w1", count=count, block_ms=0)]

    async def test_acked_entries_below_the_oldest_pending_one_are_trimmed(
        self, ready: TaskQueue
    ) -> None:
        ids = await self._delivered(ready, 5)
        for message_id in (ids[0], ids[1], ids[3]):
            await ready.ack(message_id)

        assert await ready.trim_acknowledged() == 2

        stats = await ready.stats()
        assert (stats.length, stats.pending) == (3, 2)
        # The pending ones are still there to be reclaimed and acked.
        assert await ready.touch("w2", [ids[2], ids[4]]) == 2

    async def test_nothing_goes_while_the_oldest_entry_is_pending(self, ready: TaskQueue) -> None:
        ids = await self._delivered(ready, 3)
        await ready.ack(ids[1])
        await ready.ack(ids[2])

        assert await ready.trim_acknowledged() == 0
        assert (await ready.stats()).length == 3

    async def test_entries_not_yet_delivered_are_never_trimmed(self, ready: TaskQueue) -> None:
        [first] = await self._delivered(ready, 1)
        await ready.ack(first)
        for n in range(1, 4):
            await ready.enqueue(carrier(n))

        assert await ready.trim_acknowledged() == 1

        unread = await ready.read("w1", count=10, block_ms=0)
        assert [d.envelope.execution_id for d in unread if d.envelope] == ["x-1", "x-2", "x-3"]

    async def test_a_fully_acked_stream_is_emptied_and_keeps_working(
        self, ready: TaskQueue
    ) -> None:
        for message_id in await self._delivered(ready, 3):
            await ready.ack(message_id)

        assert await ready.trim_acknowledged() == 3
        assert (await ready.stats()).length == 0

        await ready.enqueue(carrier(9))
        [again] = await ready.read("w1", count=10, block_ms=0)
        assert again.envelope is not None and again.envelope.execution_id == "x-9"
        assert await ready.trim_acknowledged() == 0

    async def test_a_reclaimed_entry_stays_until_it_is_acked(
        self, ready: TaskQueue, elapse: Elapse
    ) -> None:
        """W2: a dead worker's carrier is pending on its new owner after the claim."""
        [message_id] = await self._delivered(ready, 1)
        await elapse(50)
        [claimed] = await ready.reclaim("w2", min_idle_ms=10, count=10)
        assert claimed.message_id == message_id

        assert await ready.trim_acknowledged() == 0
        await ready.ack(message_id)
        assert await ready.trim_acknowledged() == 1

    async def test_trimming_a_new_queue_removes_nothing(self, queue: TaskQueue) -> None:
        assert await queue.trim_acknowledged() == 0
        await queue.ensure_group()
        assert await queue.trim_acknowledged() == 0


class TestMemoryQueueTrim(QueueTrimContract):
    @pytest.fixture
    def queue(self, clock: Clock) -> TaskQueue:
        return MemoryTaskQueue(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestFakeRedisQueueTrim(QueueTrimContract):
    @pytest.fixture
    def queue(self, fake_redis: redis.Redis, keys: RedisKeys) -> TaskQueue:
        return RedisTaskQueue(fake_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real


@pytest.mark.redis
class TestRedisQueueTrim(QueueTrimContract):
    @pytest.fixture
    def queue(self, real_redis: redis.Redis, keys: RedisKeys) -> TaskQueue:
        return RedisTaskQueue(real_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def test_the_trim_is_one_script_on_the_streams_hash_tag(
        self, ready: TaskQueue, real_redis: redis.Redis, keys: RedisKeys
    ) -> None:
        """Cluster-ready: every key the script touches is one of the partition's priority
        streams, passed in KEYS; one script trims all three."""
        sent: list[tuple[object, ...]] = []
        original = real_redis.execute_command

        async def recording(*args: object, **options: object) -> object:
            sent.append(args)
            return await original(*args, **options)

        await ready.trim_acknowledged()  # loads the script
        real_redis.execute_command = recording  # type: ignore[method-assign]
        try:
            await ready.trim_acknowledged()
        finally:
            real_redis.execute_command = original  # type: ignore[method-assign]
        streams = [keys.queue_stream("default", None, level) for level in PRIORITIES]
        assert [(a[0], a[2], *a[3:6]) for a in sent] == [("EVALSHA", 3, *streams)]


class NotificationTrimContract:
    @pytest.fixture
    def log(self) -> EventLog:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    @pytest.fixture
    async def ready(self, log: EventLog) -> EventLog:
        await log.ensure_group()
        return log

    async def test_acked_notifications_go_and_pending_or_unread_ones_stay(
        self, ready: EventLog
    ) -> None:
        for n in range(4):
            await ready.append(event(n))
        first, second = await ready.read_notifications("f1", count=2, block_ms=0)
        await ready.ack_notification(first.notification_id)

        assert await ready.trim_notifications(min_age_ms=0) == 1

        await ready.ack_notification(second.notification_id)
        unread = await ready.read_notifications("f1", count=10, block_ms=0)
        assert [n.event_id for n in unread] == ONE_PARTITION[2:4]

    async def test_notifications_younger_than_the_minimum_age_stay(
        self, ready: EventLog, elapse: Elapse
    ) -> None:
        """Event-bus listeners read the stream without a group: they get a grace."""
        await ready.append(event(0))
        [read] = await ready.read_notifications("f1", count=1, block_ms=0)
        await ready.ack_notification(read.notification_id)

        assert await ready.trim_notifications(min_age_ms=MIN_AGE_MS) == 0
        await elapse(MIN_AGE_MS + 50)
        assert await ready.trim_notifications(min_age_ms=MIN_AGE_MS) == 1

    async def test_a_negative_minimum_age_is_refused(self, ready: EventLog) -> None:
        with pytest.raises(ValueError, match="minimum age"):
            await ready.trim_notifications(min_age_ms=-1)


class TestMemoryNotificationTrim(NotificationTrimContract):
    @pytest.fixture
    def log(self, clock: Clock) -> EventLog:
        return MemoryEventLog(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class RedisNotificationTrim(NotificationTrimContract):
    @pytest.fixture(params=[1, 3], ids=["p1", "p3"])
    def partitions(self, request: pytest.FixtureRequest) -> int:
        return int(request.param)

    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    async def log(
        self, client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> AsyncIterator[EventLog]:
        log = RedisEventLog(client, keys, partitions=partitions)
        yield log
        await log.close()

    @staticmethod
    def stream(keys: RedisKeys, partitions: int, partition: int = 0) -> str:
        return keys.event_notifications(None if partitions == 1 else partition)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def test_with_several_groups_the_one_furthest_behind_decides(
        self, ready: EventLog, client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> None:
        other = RedisEventLog(client, keys, group="audit-filter", partitions=partitions)
        await other.ensure_group()
        for n in range(3):
            await ready.append(event(n))
        for notification in await ready.read_notifications("f1", count=3, block_ms=0):
            await ready.ack_notification(notification.notification_id)

        assert await ready.trim_notifications(min_age_ms=0) == 0  # audit read nothing

        [audited] = await other.read_notifications("a1", count=1, block_ms=0)
        assert await ready.trim_notifications(min_age_ms=0) == 0  # ... and acked nothing
        await other.ack_notification(audited.notification_id)
        assert await ready.trim_notifications(min_age_ms=0) == 1
        assert await client.xlen(self.stream(keys, partitions)) == 2

    async def test_a_stream_without_groups_is_trimmed_by_age_only(
        self, log: EventLog, client: redis.Redis, keys: RedisKeys, elapse: Elapse
    ) -> None:
        """Only the bus's listeners read it: the age alone, and never without one."""
        await log.append(event(0))

        assert await log.trim_notifications(min_age_ms=0) == 0
        await elapse(MIN_AGE_MS + 50)
        assert await log.trim_notifications(min_age_ms=MIN_AGE_MS) == 1

    async def test_every_partition_is_trimmed(
        self, ready: EventLog, client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> None:
        """K3, S5: one trim call trims the notification stream of each partition."""
        ids = [
            next(f"ev-{i}" for i in range(100) if partition_of(f"ev-{i}", partitions) == k)
            for k in range(partitions)
        ]
        for n, event_id in enumerate(ids):
            await ready.append(event(n, event_id))
        read = await ready.read_notifications("f1", count=10, block_ms=0)
        assert sorted(n.event_id for n in read) == sorted(ids)
        for notification in read:
            await ready.ack_notification(notification.notification_id)

        assert await ready.trim_notifications(min_age_ms=0) == partitions
        for k in range(partitions):
            assert await client.xlen(self.stream(keys, partitions, k)) == 0


class TestFakeRedisNotificationTrim(RedisNotificationTrim):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisNotificationTrim(RedisNotificationTrim):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
