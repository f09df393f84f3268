"""TaskQueue contract (W1, W2, W11, R4), run against every adapter family.

The Redis families run it with one partition and with three (``--partitions``). Order is a
promise within a partition only, so the tests that check an order use executions that all
land on one partition (``ONE_PARTITION``); ``test_task_queue_partitions.py`` checks what
only partitions have.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter as Multiset
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Protocol

import attrs
import pytest
import redis.asyncio as redis

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.application.codec import encode_envelope
from plaita.application.ports import Clock, DeadLetter, TaskQueue
from plaita.domain.envelope import CURRENT_SCHEMA_VERSION, LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.partitions import partition_of
from plaita.domain.priorities import PRIORITIES, SHARE_CYCLE, Priority, split_priority_id

Elapse = Callable[[int], Awaitable[None]]


class RawTaskQueue(TaskQueue, Protocol):
    async def enqueue_raw(self, fields: Mapping[str | bytes, str | bytes]) -> str: ...


#: What a foreign producer may write: `XADD <stream> '*' envelope "$(printf '\xff\xfe')"`.
NOT_UTF8 = {"envelope": b"\xff\xfe", "schema_version": "1"}
NOT_UTF8_BASE64 = (("ZW52ZWxvcGU=", "//4="), ("c2NoZW1hX3ZlcnNpb24=", "MQ=="))
#: `json.loads` of this raises RecursionError.
TEN_THOUSAND_DEEP = {"envelope": "[" * 10_000 + "]" * 10_000, "schema_version": "1"}
#: Executions whose carriers all land on partition 0 of 3 (and of 1), where a carrier that
#: names no execution goes too: their carriers keep the order they were enqueued in.
ONE_PARTITION = [f"x-{n}" for n in range(100) if partition_of(f"x-{n}", 3) == 0][:5]


def envelope(execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="orders",
        version="1",
        params={"order": {"id": 7, "lines": [1, 2]}},
        now_ms=1_760_000_000_000,
        generations=LEGACY_GENERATIONS,
    )


def prioritized(execution_id: str, priority: Priority) -> TaskEnvelope:
    return attrs.evolve(envelope(execution_id), priority=priority)


class QueueContract:
    @pytest.fixture
    def queue(self) -> RawTaskQueue:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    @pytest.fixture
    async def ready(self, queue: RawTaskQueue) -> RawTaskQueue:
        await queue.ensure_group()
        return queue

    async def test_enqueue_read_ack_round_trip(self, ready: RawTaskQueue) -> None:
        sent = envelope()
        message_id = await ready.enqueue(sent)

        [delivery] = await ready.read("worker-a", count=10, block_ms=0)
        assert delivery.message_id == message_id
        assert delivery.envelope == sent
        assert delivery.raw == encode_envelope(sent)
        assert (delivery.delivery_count, delivery.reclaimed, delivery.problem) == (1, False, None)

        await ready.ack(message_id)
        stats = await ready.stats()
        assert (stats.length, stats.pending) == (1, 0)
        assert await ready.read("worker-a", count=10, block_ms=0) == []

    async def test_reads_in_enqueue_order_and_respect_count(self, ready: RawTaskQueue) -> None:
        ids = [await ready.enqueue(envelope(x)) for x in ONE_PARTITION[:3]]

        first = await ready.read("worker-a", count=2, block_ms=0)
        second = await ready.read("worker-b", count=2, block_ms=0)

        assert [d.message_id for d in first + second] == ids
        assert [d.envelope.execution_id for d in first + second if d.envelope] == ONE_PARTITION[:3]

    async def test_unacked_entry_stays_pending_and_is_counted(self, ready: RawTaskQueue) -> None:
        """W1: a carrier is acked only after its dispatch returned; until then it is pending."""
        await ready.enqueue(envelope("x-1"))
        await ready.enqueue(envelope("x-2"))
        first, _second = await ready.read("worker-a", count=10, block_ms=0)

        await ready.ack(first.message_id)

        stats = await ready.stats()
        assert (stats.length, stats.pending) == (2, 1)

    async def test_stats_of_an_empty_queue(self, ready: RawTaskQueue) -> None:
        stats = await ready.stats()
        assert (stats.length, stats.pending, stats.oldest_unread_ms) == (0, 0, None)

    async def test_stats_date_the_oldest_carrier_no_worker_has_read(
        self, ready: RawTaskQueue
    ) -> None:
        """C1 queue lag: the id time of the first carrier after the group's last delivery."""
        ids = [await ready.enqueue(envelope(x)) for x in ONE_PARTITION[:3]]
        assert (await ready.stats()).oldest_unread_ms == int(ids[0].split("-")[0])

        await ready.read("worker-a", count=2, block_ms=0)
        assert (await ready.stats()).oldest_unread_ms == int(ids[2].split("-")[0])

        await ready.read("worker-a", count=5, block_ms=0)
        assert (await ready.stats()).oldest_unread_ms is None, "read, even if not acked"

    async def test_group_starts_at_zero_so_earlier_entries_are_delivered(
        self, queue: RawTaskQueue
    ) -> None:
        message_id = await queue.enqueue(envelope())
        await queue.ensure_group()
        await queue.ensure_group()  # idempotent

        [delivery] = await queue.read("worker-a", count=10, block_ms=0)
        assert delivery.message_id == message_id

    async def test_reclaim_takes_an_idle_entry_and_counts_the_redelivery(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        """W2: a carrier left pending by a crashed worker is taken over after min_idle."""
        sent = envelope()
        message_id = await ready.enqueue(sent)
        await ready.read("crashed", count=10, block_ms=0)
        await elapse(150)

        [delivery] = await ready.reclaim("rescuer", min_idle_ms=100, count=10)

        assert delivery.message_id == message_id
        assert delivery.envelope == sent
        assert (delivery.delivery_count, delivery.reclaimed) == (2, True)
        assert (await ready.stats()).pending == 1
        await ready.ack(message_id)
        assert (await ready.stats()).pending == 0

    async def test_reclaim_leaves_an_entry_younger_than_min_idle(self, ready: RawTaskQueue) -> None:
        await ready.enqueue(envelope())
        await ready.read("busy", count=10, block_ms=0)

        assert await ready.reclaim("rescuer", min_idle_ms=60_000, count=10) == []

    async def test_reclaim_again_counts_every_delivery(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        await ready.enqueue(envelope())
        await ready.read("first", count=10, block_ms=0)
        await elapse(60)
        await ready.reclaim("second", min_idle_ms=50, count=10)
        await elapse(60)

        [delivery] = await ready.reclaim("third", min_idle_ms=50, count=10)
        assert delivery.delivery_count == 3

    async def test_touched_entry_is_not_reclaimed_and_keeps_its_delivery_count(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        """W5 (I0): a live holder refreshes its carrier, so it never looks idle to a rescuer."""
        message_id = await ready.enqueue(envelope())
        await ready.read("holder", count=10, block_ms=0)
        await elapse(120)

        assert await ready.touch("holder", [message_id]) == 1

        # Idle since the read (≥ 120 ms) but not since the touch: left alone.
        assert await ready.reclaim("rescuer", min_idle_ms=100, count=10) == []
        assert (await ready.stats()).pending == 1
        await elapse(120)

        # Idle again: reclaimed, and the touch did not count as a delivery.
        [delivery] = await ready.reclaim("rescuer", min_idle_ms=100, count=10)
        assert delivery.message_id == message_id
        assert (delivery.delivery_count, delivery.reclaimed) == (2, True)

    async def test_touch_ignores_acked_and_unknown_ids(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        acked_id = await ready.enqueue(envelope("x-1"))
        held_id = await ready.enqueue(envelope("x-2"))
        await ready.read("holder", count=10, block_ms=0)
        await ready.ack(acked_id)

        assert await ready.touch("holder", [acked_id]) == 0
        assert await ready.touch("holder", ["1-1"]) == 0
        assert await ready.touch("holder", []) == 0
        assert await ready.touch("holder", [acked_id, held_id, "1-1", held_id]) == 1

        stats = await ready.stats()
        assert (stats.length, stats.pending) == (2, 1)
        await elapse(60)
        [delivery] = await ready.reclaim("rescuer", min_idle_ms=50, count=10)
        assert (delivery.message_id, delivery.delivery_count) == (held_id, 2)

    async def test_read_waits_block_ms_then_returns_empty(self, ready: RawTaskQueue) -> None:
        started = time.monotonic()
        assert await ready.read("worker-a", count=10, block_ms=100) == []
        assert 0.08 <= time.monotonic() - started < 2

    async def test_blocked_read_returns_as_soon_as_an_entry_arrives(
        self, ready: RawTaskQueue
    ) -> None:
        started = time.monotonic()
        reading = asyncio.create_task(ready.read("worker-a", count=10, block_ms=5_000))
        await asyncio.sleep(0.05)
        message_id = await ready.enqueue(envelope())

        [delivery] = await asyncio.wait_for(reading, timeout=2)
        assert delivery.message_id == message_id
        assert time.monotonic() - started < 2

    async def test_malformed_entry_comes_back_with_a_problem_and_its_raw_fields(
        self, ready: RawTaskQueue
    ) -> None:
        """R4: an undecodable carrier is kept, raw, as dead-letter evidence; read never raises."""
        fields = {"envelope": '{"kind": "start", "execution_id": ', "schema_version": "1"}
        message_id = await ready.enqueue_raw(fields)

        [delivery] = await ready.read("worker-a", count=10, block_ms=0)

        assert delivery.message_id == message_id
        assert delivery.envelope is None
        assert delivery.problem and "malformed task envelope" in delivery.problem
        assert delivery.raw == fields
        assert delivery.delivery_count == 1

    async def test_entry_without_an_envelope_field_is_reported(self, ready: RawTaskQueue) -> None:
        await ready.enqueue_raw({"payload": "hello"})

        [delivery] = await ready.read("worker-a", count=10, block_ms=0)

        assert delivery.envelope is None
        assert delivery.problem and "'envelope'" in delivery.problem
        assert delivery.raw == {"payload": "hello"}

    async def test_newer_schema_version_comes_back_undecoded(self, ready: RawTaskQueue) -> None:
        """W11: a worker refuses an envelope newer than it understands, without raising."""
        fields = {**encode_envelope(envelope()), "schema_version": str(CURRENT_SCHEMA_VERSION + 1)}
        await ready.enqueue_raw(fields)

        [delivery] = await ready.read("worker-a", count=10, block_ms=0)

        assert delivery.envelope is None
        assert delivery.problem and "newer" in delivery.problem
        assert delivery.raw == fields

    async def test_a_bad_entry_does_not_hide_the_good_ones_around_it(
        self, ready: RawTaskQueue
    ) -> None:
        await ready.enqueue(envelope(ONE_PARTITION[0]))
        await ready.enqueue_raw({"envelope": "not json"})
        await ready.enqueue(envelope(ONE_PARTITION[1]))

        deliveries = await ready.read("worker-a", count=10, block_ms=0)

        assert [d.envelope.execution_id if d.envelope else None for d in deliveries] == [
            ONE_PARTITION[0],
            None,
            ONE_PARTITION[1],
        ]

    async def test_reclaimed_malformed_entry_is_reported_too(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        await ready.enqueue_raw({"envelope": "not json", "schema_version": "1"})
        await ready.read("crashed", count=10, block_ms=0)
        await elapse(60)

        [delivery] = await ready.reclaim("rescuer", min_idle_ms=50, count=10)

        assert delivery.envelope is None and delivery.problem
        assert (delivery.delivery_count, delivery.reclaimed) == (2, True)

    async def test_a_non_utf8_entry_is_undecodable_and_does_not_fail_its_batch(
        self, ready: RawTaskQueue
    ) -> None:
        """R4: one non-UTF-8 byte used to fail every read of the batch, for ever."""
        first = await ready.enqueue(envelope(ONE_PARTITION[0]))
        garbage = await ready.enqueue_raw(NOT_UTF8)
        last = await ready.enqueue(envelope(ONE_PARTITION[1]))
        assert (await ready.stats()).oldest_unread_ms is not None

        deliveries = await ready.read("worker-a", count=10, block_ms=0)

        assert [d.message_id for d in deliveries] == [first, garbage, last]
        good_1, bad, good_3 = deliveries
        assert good_1.envelope == envelope(ONE_PARTITION[0])
        assert good_3.envelope == envelope(ONE_PARTITION[1])
        assert bad.envelope is None
        assert bad.problem and "not UTF-8" in bad.problem and "'envelope'" in bad.problem
        assert bad.raw == {"envelope": "\\xff\\xfe", "schema_version": "1"}
        assert bad.raw_base64 == NOT_UTF8_BASE64
        assert good_1.raw_base64 is None

    async def test_reclaim_survives_a_non_utf8_entry(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        """R4, W2: a killed worker's carriers are reclaimed even with garbage pending."""
        await ready.enqueue_raw(NOT_UTF8)
        held = await ready.enqueue(envelope(ONE_PARTITION[0]))
        await ready.read("killed", count=10, block_ms=0)
        await elapse(60)

        reclaimed = await ready.reclaim("rescuer", min_idle_ms=50, count=10)

        assert [d.envelope is None for d in reclaimed] == [True, False]
        assert reclaimed[1].message_id == held
        assert reclaimed[0].raw_base64 == NOT_UTF8_BASE64
        assert all(d.reclaimed and d.delivery_count == 2 for d in reclaimed)

    async def test_a_ten_thousand_deep_envelope_is_undecodable_naming_the_depth_limit(
        self, ready: RawTaskQueue
    ) -> None:
        """R4: over the JSON depth limit, refused before any parser recurses into it."""
        await ready.enqueue_raw(TEN_THOUSAND_DEEP)

        [delivery] = await ready.read("worker-a", count=10, block_ms=0)

        assert delivery.envelope is None
        assert delivery.problem and "depth limit" in delivery.problem
        assert delivery.raw == TEN_THOUSAND_DEEP

    async def test_dead_letter_of_a_non_utf8_entry_keeps_its_bytes_in_base64(
        self, ready: RawTaskQueue
    ) -> None:
        """R4, W9: the evidence is lossless; the readable copy shows the bytes escaped."""
        message_id = await ready.enqueue_raw(NOT_UTF8)
        [delivery] = await ready.read("worker-a", count=10, block_ms=0)

        dlq_id = await ready.dead_letter(delivery, delivery.problem or "")

        [letter] = await ready.dead_letters()
        assert letter == DeadLetter(
            dlq_id, message_id, delivery.problem or "", delivery.raw, NOT_UTF8_BASE64
        )
        assert (await ready.stats()).pending == 0

    async def test_dead_letter_copies_raw_fields_and_reason_then_acks(
        self, ready: RawTaskQueue
    ) -> None:
        """R4: the DLQ keeps the evidence; the carrier leaves the pending list but not the log."""
        fields = {"envelope": "not json", "schema_version": "1"}
        message_id = await ready.enqueue_raw(fields)
        [delivery] = await ready.read("worker-a", count=10, block_ms=0)

        dlq_id = await ready.dead_letter(delivery, delivery.problem or "undecodable")

        [letter] = await ready.dead_letters()
        assert letter == DeadLetter(dlq_id, message_id, delivery.problem or "", fields)
        stats = await ready.stats()
        assert (stats.length, stats.pending) == (1, 0)
        assert await ready.reclaim("rescuer", min_idle_ms=0, count=10) == []

    async def test_dead_letters_are_listed_newest_first_up_to_count(
        self, ready: RawTaskQueue
    ) -> None:
        for execution_id in ONE_PARTITION[:3]:
            await ready.enqueue(envelope(execution_id))
        for delivery in await ready.read("worker-a", count=10, block_ms=0):
            await ready.dead_letter(delivery, f"budget spent: {delivery.message_id}")

        letters = await ready.dead_letters(count=2)

        assert [json.loads(letter.raw["envelope"])["execution_id"] for letter in letters] == [
            ONE_PARTITION[2],
            ONE_PARTITION[1],
        ]
        assert all(letter.reason == f"budget spent: {letter.message_id}" for letter in letters)

    async def test_no_dead_letters_at_first(self, ready: RawTaskQueue) -> None:
        assert await ready.dead_letters() == []
        assert await ready.dead_letter_length() == 0

    async def test_dead_letter_length_counts_the_dlq_not_the_stream(
        self, ready: RawTaskQueue
    ) -> None:
        """C5: the DLQ gauge is the queue's own answer; nothing reads its Redis key aside."""
        for n in range(3):
            await ready.enqueue(envelope(f"x-{n}"))
        first, second, _third = await ready.read("worker-a", count=10, block_ms=0)

        await ready.dead_letter(first, "budget spent")
        await ready.dead_letter(second, "budget spent")

        assert await ready.dead_letter_length() == 2
        assert (await ready.stats()).length == 3

    # --- priorities -------------------------------------------------------------------

    async def test_high_is_read_before_normal_and_normal_before_low(
        self, ready: RawTaskQueue
    ) -> None:
        low, normal, high = (
            prioritized(x, level)
            for x, level in zip(
                ONE_PARTITION[:3], (Priority.LOW, Priority.NORMAL, Priority.HIGH), strict=True
            )
        )
        for carrier in (low, normal, high):
            await ready.enqueue(carrier)

        deliveries = await ready.read("worker-a", count=3, block_ms=0)

        assert [d.envelope for d in deliveries] == [high, normal, low]

    async def test_a_normal_carriers_id_is_its_stream_id_and_a_high_ones_names_its_level(
        self, ready: RawTaskQueue
    ) -> None:
        normal_id = await ready.enqueue(prioritized("x-1", Priority.NORMAL))
        high_id = await ready.enqueue(prioritized("x-2", Priority.HIGH))

        assert split_priority_id(normal_id) == (Priority.NORMAL, normal_id)
        where = split_priority_id(high_id)
        assert where is not None and where[0] is Priority.HIGH

    async def test_a_blocked_read_returns_when_a_high_carrier_arrives(
        self, ready: RawTaskQueue
    ) -> None:
        reader = asyncio.ensure_future(ready.read("worker-a", count=1, block_ms=5_000))
        await asyncio.sleep(0.05)
        sent = prioritized("x-1", Priority.HIGH)
        await ready.enqueue(sent)

        [delivery] = await asyncio.wait_for(reader, 5)
        assert delivery.envelope == sent

    async def test_every_level_is_counted_acked_reclaimed_and_dead_lettered(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        sent = {
            level: prioritized(x, level)
            for x, level in zip(ONE_PARTITION, PRIORITIES, strict=False)
        }
        ids = {level: await ready.enqueue(carrier) for level, carrier in sent.items()}
        assert (await ready.stats()).length == 3

        await ready.read("crashed", count=3, block_ms=0)
        assert (await ready.stats()).pending == 3
        await elapse(150)
        reclaimed = await ready.reclaim("rescuer", min_idle_ms=100, count=10)

        assert {d.message_id: d.envelope for d in reclaimed} == {
            ids[level]: sent[level] for level in PRIORITIES
        }
        assert all(d.delivery_count == 2 for d in reclaimed)
        by_level = {d.envelope.priority: d for d in reclaimed if d.envelope}
        assert await ready.touch("rescuer", list(ids.values())) == 3
        await ready.ack(ids[Priority.HIGH])
        await ready.dead_letter(by_level[Priority.LOW], "budget spent")
        assert (await ready.stats()).pending == 1
        assert [d.raw for d in await ready.dead_letters()] == [encode_envelope(sent[Priority.LOW])]
        await ready.ack(ids[Priority.NORMAL])
        assert (await ready.stats()).pending == 0
        await ready.trim_acknowledged()
        assert (await ready.stats()).length == 0

    async def test_a_read_ahead_carrier_a_reclaim_took_is_not_read_again(
        self, ready: RawTaskQueue, elapse: Elapse
    ) -> None:
        """What one read brought beyond its share waits pending on the consumer; if its own
        reclaim takes it meanwhile, the next read must not hand it out a second time."""
        for x, level in zip(ONE_PARTITION, PRIORITIES, strict=False):
            await ready.enqueue(prioritized(x, level))
        [first] = await ready.read("worker-a", count=1, block_ms=0)
        await elapse(150)

        reclaimed = await ready.reclaim("worker-a", min_idle_ms=100, count=10)
        later = await ready.read("worker-a", count=10, block_ms=0)

        assert first.envelope is not None and first.envelope.priority is Priority.HIGH
        assert {d.message_id for d in reclaimed} >= {d.message_id for d in later}
        assert len({d.message_id for d in reclaimed + later} - {first.message_id}) == 2

    async def test_a_malformed_priority_is_read_from_the_normal_stream_by_name(
        self, ready: RawTaskQueue
    ) -> None:
        fields = encode_envelope(envelope("x-1"))
        document = json.loads(fields["envelope"]) | {"priority": "urgent"}
        await ready.enqueue_raw(fields | {"envelope": json.dumps(document)})

        [delivery] = await ready.read("worker-a", count=1, block_ms=0)

        assert delivery.envelope is None
        assert delivery.problem is not None and "priority" in delivery.problem
        assert split_priority_id(delivery.message_id) == (Priority.NORMAL, delivery.message_id)


class PriorityShareContract:
    """The share for lower levels across many small reads (one partition; with several, a
    read refills only once what the previous round brought is taken)."""

    @pytest.fixture
    def queue(self) -> TaskQueue:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def test_each_level_gets_its_share_while_all_three_are_backlogged(
        self, queue: TaskQueue
    ) -> None:
        await queue.ensure_group()
        for n in range(25):
            for level in PRIORITIES:
                await queue.enqueue(prioritized(f"x-{level.value}-{n}", level))

        taken: list[Priority] = []
        for _ in range(30):
            [delivery] = await queue.read("worker-a", count=1, block_ms=0)
            assert delivery.envelope is not None
            taken.append(delivery.envelope.priority)
            await queue.ack(delivery.message_id)

        assert taken[:10] == list(SHARE_CYCLE)
        assert Multiset(taken) == {Priority.HIGH: 21, Priority.NORMAL: 6, Priority.LOW: 3}

    async def test_a_level_with_nothing_ready_gives_its_share_to_the_others(
        self, queue: TaskQueue
    ) -> None:
        await queue.ensure_group()
        for n in range(12):
            await queue.enqueue(prioritized(f"x-low-{n}", Priority.LOW))
        for n in range(3):
            await queue.enqueue(prioritized(f"x-high-{n}", Priority.HIGH))

        taken = []
        for _ in range(15):
            taken += await queue.read("worker-a", count=1, block_ms=0)

        levels = [d.envelope.priority for d in taken if d.envelope]
        assert levels == [Priority.HIGH] * 3 + [Priority.LOW] * 12
        assert await queue.read("worker-a", count=1, block_ms=0) == []


class TestMemoryPriorityShare(PriorityShareContract):
    @pytest.fixture
    def queue(self, clock: Clock) -> TaskQueue:
        return MemoryTaskQueue(clock)


@pytest.mark.redis
class TestRedisPriorityShare(PriorityShareContract):
    @pytest.fixture
    async def queue(self, real_redis: redis.Redis, keys: RedisKeys) -> AsyncIterator[TaskQueue]:
        queue = RedisTaskQueue(real_redis, keys)
        yield queue
        await queue.close()

    async def test_a_normal_only_read_is_one_xreadgroup_over_the_three_streams(
        self, queue: TaskQueue, real_redis: redis.Redis, keys: RedisKeys
    ) -> None:
        """The steady state's cost: one round trip per read, as with one stream."""
        await queue.ensure_group()
        await queue.enqueue(envelope("x-1"))
        sent: list[tuple[object, ...]] = []
        original = real_redis.execute_command

        async def recording(*args: object, **options: object) -> object:
            sent.append(args)
            return await original(*args, **options)

        real_redis.execute_command = recording  # type: ignore[method-assign]
        try:
            [delivery] = await queue.read("worker-a", count=4, block_ms=0)
            assert await queue.read("worker-a", count=4, block_ms=0) == []
        finally:
            real_redis.execute_command = original  # type: ignore[method-assign]
        streams = [keys.queue_stream("default", None, level) for level in PRIORITIES]
        assert [a[0] for a in sent] == ["XREADGROUP", "XREADGROUP"]
        assert all(list(a[-6:-3]) == streams for a in sent)
        assert delivery.envelope == envelope("x-1")


class TestMemoryQueue(QueueContract):
    @pytest.fixture
    def queue(self, clock: Clock) -> RawTaskQueue:
        return MemoryTaskQueue(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class RedisQueueContract(QueueContract):
    """The contract with one partition and with three."""

    @pytest.fixture(params=[1, 3], ids=["p1", "p3"])
    def partitions(self, request: pytest.FixtureRequest) -> int:
        return int(request.param)

    @pytest.fixture
    async def queue(
        self, client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> AsyncIterator[RawTaskQueue]:
        queue = RedisTaskQueue(client, keys, partitions=partitions)
        yield queue
        await queue.close()


class TestFakeRedisQueue(RedisQueueContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisQueue(RedisQueueContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


@pytest.mark.redis
class TestRedisQueueWithItsOwnDeadLetterKey(QueueContract):
    """``--dlq-key``: the whole contract holds with a DLQ stream named by the operator."""

    @pytest.fixture
    def queue(self, real_redis: redis.Redis, keys: RedisKeys) -> RawTaskQueue:
        return RedisTaskQueue(
            real_redis, keys, dead_letter_key=f"{keys.namespace}:{{default}}:dead"
        )

    async def test_dead_letters_go_to_the_named_key_only(
        self, ready: RawTaskQueue, real_redis: redis.Redis, keys: RedisKeys
    ) -> None:
        await ready.enqueue(envelope("x-1"))
        [delivery] = await ready.read("worker-a", count=1, block_ms=0)

        await ready.dead_letter(delivery, "budget spent")

        assert await real_redis.xlen(f"{keys.namespace}:{{default}}:dead") == 1
        assert await real_redis.exists(keys.queue_dead_letters("default")) == 0
        assert await ready.dead_letter_length() == 1
