"""DelayQueue contract (W8, V8), run against every adapter family.

A carrier scheduled for later is invisible to readers until ``move_due`` passes its due time;
then it is read from the task queue exactly like an enqueued carrier. A carrier is never lost
and never duplicated, whatever the interleaving of schedules and moves.

The Redis families run it with one partition and with three (``--partitions``): each
partition's delay set moves into its own stream. Order is a promise within a partition, so
the tests that check an order use executions of one partition (``ONE_PARTITION``).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter as Multiset
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, cast

import attrs
import pytest
import redis.asyncio as redis

from plaita.adapters.memory.delay_queue import MemoryDelayQueue
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.redis.delay_queue import RedisDelayQueue
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.application.codec import encode_envelope
from plaita.application.ports import DelayQueue, Delivery, TaskQueue
from plaita.domain.envelope import LEGACY_GENERATIONS, CarrierKind, ResumeType, TaskEnvelope
from plaita.domain.partitions import partition_of
from plaita.domain.priorities import Priority

from .conftest import FakeClock

NOW = 1_760_000_000_000
#: Executions whose carriers all land on partition 0 of 3 (and of 1), as raw fields do.
ONE_PARTITION = [f"x-{n}" for n in range(200) if partition_of(f"x-{n}", 3) == 0][:8]


class RawDelayQueue(DelayQueue, Protocol):
    async def schedule_raw(self, fields: Mapping[str, str], *, due_ms: int) -> str: ...


def envelope(execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="orders",
        version="1",
        params={"order": {"id": 7, "lines": [1, 2]}},
        now_ms=NOW,
        generations=LEGACY_GENERATIONS,
    )


def timeout_carrier(execution_id: str = "x-1") -> TaskEnvelope:
    """A V8 timer: an event wait's timeout, with text that needs escaping at every level."""
    return TaskEnvelope(
        kind=CarrierKind.RESUME,
        execution_id=execution_id,
        flow_id="orders",
        timestamp_ms=NOW,
        version="2",
        params={"note": 'quotes " and \\ backslash\nnew line', "name": "Zoë 🚚 東京", "n": None},
        resume_type=ResumeType.TIMEOUT,
        subscription_id="sub:1",
        tenant_id="acme",
        generations=LEGACY_GENERATIONS,
    )


async def read_all(queue: TaskQueue) -> list[Delivery]:
    return await queue.read("worker-a", count=10_000, block_ms=0)


def execution_ids(deliveries: list[Delivery]) -> list[str]:
    assert all(d.envelope is not None for d in deliveries), [d.problem for d in deliveries]
    return [d.envelope.execution_id for d in deliveries if d.envelope is not None]


class DelayQueueContract:
    @pytest.fixture
    def queue(self) -> TaskQueue:
        raise NotImplementedError

    @pytest.fixture
    def delay(self, queue: TaskQueue) -> RawDelayQueue:
        raise NotImplementedError

    @pytest.fixture
    async def ready(self, queue: TaskQueue) -> TaskQueue:
        await queue.ensure_group()
        return queue

    async def test_a_carrier_is_not_readable_before_it_is_due(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        await delay.schedule(envelope(), due_ms=NOW + 1_000)

        assert await delay.move_due(now_ms=NOW + 999) == 0

        assert await read_all(ready) == []
        assert await delay.pending() == 1
        assert (await ready.stats()).length == 0

    async def test_a_due_carrier_reads_exactly_like_an_enqueued_one(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        sent = envelope()
        await delay.schedule(sent, due_ms=NOW + 1_000)

        assert await delay.move_due(now_ms=NOW + 1_000) == 1  # due at its due time exactly

        [delivery] = await read_all(ready)
        assert delivery.envelope == sent
        assert delivery.raw == encode_envelope(sent)
        assert (delivery.delivery_count, delivery.reclaimed, delivery.problem) == (1, False, None)
        assert await delay.pending() == 0
        await ready.ack(delivery.message_id)
        assert (await ready.stats()).pending == 0

    async def test_a_timeout_carrier_with_awkward_text_survives_the_move(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        """V8: a resume_type=timeout carrier, its params escaped inside the delay set member."""
        sent = timeout_carrier()
        await delay.schedule(sent, due_ms=NOW)

        await delay.move_due(now_ms=NOW)

        [delivery] = await read_all(ready)
        assert delivery.envelope == sent
        assert delivery.raw == encode_envelope(sent)

    async def test_raw_fields_are_moved_as_they_are(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        fields = {"envelope": "not json", "schema_version": "1", "extra": ""}
        await delay.schedule_raw(fields, due_ms=NOW)

        await delay.move_due(now_ms=NOW)

        [delivery] = await read_all(ready)
        assert delivery.envelope is None and delivery.problem
        assert delivery.raw == fields

    async def test_a_carrier_needs_fields(self, delay: RawDelayQueue) -> None:
        with pytest.raises(ValueError, match="field"):
            await delay.schedule_raw({}, due_ms=NOW)
        assert await delay.pending() == 0

    async def test_move_due_moves_at_most_limit(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        for n, execution_id in enumerate(ONE_PARTITION[:5]):
            await delay.schedule(envelope(execution_id), due_ms=NOW + n)

        assert await delay.move_due(now_ms=NOW + 10, limit=2) == 2
        assert await delay.pending() == 3
        assert execution_ids(await read_all(ready)) == ONE_PARTITION[:2]
        assert await delay.move_due(now_ms=NOW + 10, limit=2) == 2
        assert await delay.move_due(now_ms=NOW + 10, limit=2) == 1
        assert await delay.move_due(now_ms=NOW + 10, limit=2) == 0
        assert execution_ids(await read_all(ready)) == ONE_PARTITION[2:5]

    @pytest.mark.parametrize("limit", [0, -1])
    async def test_a_limit_below_one_moves_nothing(
        self, delay: RawDelayQueue, ready: TaskQueue, limit: int
    ) -> None:
        await delay.schedule(envelope(), due_ms=NOW)

        assert await delay.move_due(now_ms=NOW, limit=limit) == 0
        assert await delay.pending() == 1
        assert await read_all(ready) == []

    async def test_carriers_move_in_due_order_whatever_the_schedule_order(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        named = dict(zip((300, 100, 200, 50), ONE_PARTITION, strict=False))
        for due, execution_id in named.items():
            await delay.schedule(envelope(execution_id), due_ms=NOW + due)

        assert await delay.move_due(now_ms=NOW + 100, limit=1) == 1
        assert await delay.move_due(now_ms=NOW + 1_000) == 3

        assert execution_ids(await read_all(ready)) == [named[due] for due in (50, 100, 200, 300)]

    async def test_only_due_carriers_move(self, delay: RawDelayQueue, ready: TaskQueue) -> None:
        early, now, later = ONE_PARTITION[:3]
        await delay.schedule(envelope(early), due_ms=NOW - 5_000)
        await delay.schedule(envelope(now), due_ms=NOW)
        await delay.schedule(envelope(later), due_ms=NOW + 1)

        assert await delay.move_due(now_ms=NOW) == 2

        assert execution_ids(await read_all(ready)) == [early, now]
        assert await delay.pending() == 1

    async def test_two_identical_envelopes_are_two_carriers(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        """A retry copy and a timer for the same carrier must both arrive."""
        sent = envelope()
        first = await delay.schedule(sent, due_ms=NOW)
        second = await delay.schedule(sent, due_ms=NOW)

        assert first != second
        assert await delay.pending() == 2
        assert await delay.move_due(now_ms=NOW) == 2

        deliveries = await read_all(ready)
        assert [d.envelope for d in deliveries] == [sent, sent]
        assert len({d.message_id for d in deliveries}) == 2

    async def test_pending_counts_waiting_carriers(self, delay: RawDelayQueue) -> None:
        assert await delay.pending() == 0
        for n in range(3):
            await delay.schedule(envelope(f"x-{n}"), due_ms=NOW + n * 100)
        assert await delay.pending() == 3

        await delay.move_due(now_ms=NOW + 100)

        assert await delay.pending() == 1

    async def test_carriers_moved_before_the_group_exists_are_delivered(
        self, delay: RawDelayQueue, queue: TaskQueue
    ) -> None:
        await delay.schedule(envelope(), due_ms=NOW)
        await delay.move_due(now_ms=NOW)
        await queue.ensure_group()

        assert execution_ids(await read_all(queue)) == ["x-1"]

    async def test_concurrent_moves_never_take_a_carrier_twice(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        for n in range(30):
            await delay.schedule(envelope(f"x-{n}"), due_ms=NOW + n)

        moved = await asyncio.gather(*(delay.move_due(now_ms=NOW + 100, limit=7) for _ in range(6)))

        assert sum(moved) == 30
        assert sorted(execution_ids(await read_all(ready))) == sorted(f"x-{n}" for n in range(30))
        assert await delay.pending() == 0

    @pytest.mark.parametrize("seed", [1, 2, 3])
    async def test_nothing_is_lost_or_duplicated_across_interleaved_calls(
        self, delay: RawDelayQueue, ready: TaskQueue, seed: int
    ) -> None:
        """50 random schedules and moves (identical envelopes included) against a model."""
        rng = random.Random(seed)
        now = NOW
        held: list[tuple[int, str]] = []  # the model: (due ms, execution id)
        delivered: Multiset[str] = Multiset()
        scheduled: Multiset[str] = Multiset()
        for _ in range(50):
            if rng.random() < 0.6:
                # One partition: the model's order holds within one (see the docstring).
                execution_id = ONE_PARTITION[rng.randrange(6)]
                due = now + rng.randrange(-20, 60)
                await delay.schedule(envelope(execution_id), due_ms=due)
                held.append((due, execution_id))
                scheduled[execution_id] += 1
            else:
                now += rng.randrange(0, 40)
                limit = rng.randrange(1, 5)
                due_now = sorted(h for h in held if h[0] <= now)
                expected = due_now[:limit]
                # Ties at the limit boundary may move in any order: compare by due time.
                moved = await delay.move_due(now_ms=now, limit=limit)
                assert moved == len(expected)
                arrived = execution_ids(await read_all(ready))
                assert len(arrived) == moved
                boundary = expected[-1][0] if expected else None
                certain = Multiset(x for due, x in expected if due != boundary)
                assert not certain - Multiset(arrived)
                for execution_id in arrived:
                    candidates = [h for h in held if h[1] == execution_id and h[0] <= now]
                    assert candidates, f"{execution_id} moved but was not due"
                    held.remove(min(candidates))
                delivered.update(arrived)
            assert await delay.pending() == len(held)

        assert await delay.move_due(now_ms=now + 10_000, limit=1_000) == len(held)
        delivered.update(execution_ids(await read_all(ready)))
        assert delivered == scheduled
        assert await delay.pending() == 0

    async def test_a_high_or_low_carrier_moves_into_its_priority_stream(
        self, delay: RawDelayQueue, ready: TaskQueue
    ) -> None:
        """A retry of an urgent start is read as urgent once due (it keeps its priority)."""
        low, normal, high = (
            attrs.evolve(envelope(x), priority=level)
            for x, level in zip(
                ONE_PARTITION[:3], (Priority.LOW, Priority.NORMAL, Priority.HIGH), strict=True
            )
        )
        for carrier in (low, normal, high):
            await delay.schedule(carrier, due_ms=NOW)

        assert await delay.move_due(now_ms=NOW) == 3

        deliveries = await ready.read("worker-a", count=3, block_ms=0)
        assert [d.envelope for d in deliveries] == [high, normal, low]


class TestMemoryDelayQueue(DelayQueueContract):
    @pytest.fixture
    def queue(self, clock: FakeClock) -> MemoryTaskQueue:
        return MemoryTaskQueue(clock)

    @pytest.fixture
    def delay(self, clock: FakeClock, queue: MemoryTaskQueue) -> RawDelayQueue:
        return MemoryDelayQueue(clock, queue)


class RedisDelayQueueContract(DelayQueueContract):
    """The shared contract plus the Redis layout: members, scores, queue names, evidence."""

    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture(params=[1, 3], ids=["p1", "p3"])
    def partitions(self, request: pytest.FixtureRequest) -> int:
        return int(request.param)

    @pytest.fixture
    async def queue(
        self, client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> AsyncIterator[TaskQueue]:
        queue = RedisTaskQueue(client, keys, partitions=partitions)
        yield queue
        await queue.close()

    @pytest.fixture
    def delay(self, client: redis.Redis, keys: RedisKeys, partitions: int) -> RawDelayQueue:
        return RedisDelayQueue(client, keys, partitions=partitions)

    @staticmethod
    def delayed_key(keys: RedisKeys, partitions: int, execution_id: str, queue: str) -> str:
        """The delay set ``execution_id``'s carriers wait in."""
        partition = None if partitions == 1 else partition_of(execution_id, partitions)
        return keys.queue_delayed(queue, partition)

    async def test_a_member_holds_a_timer_id_and_the_stream_fields(
        self, delay: RawDelayQueue, client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> None:
        sent = timeout_carrier()
        timer_id = await delay.schedule(sent, due_ms=NOW + 5)

        key = self.delayed_key(keys, partitions, sent.execution_id, "default")
        rows = await client.zrange(key, 0, -1, withscores=True)

        [(member, score)] = cast(list[tuple[Any, float]], rows)

        assert score == NOW + 5
        document = json.loads(member)
        assert document["id"] == timer_id
        fields = document["fields"]
        assert dict(zip(fields[::2], fields[1::2], strict=True)) == encode_envelope(sent)

    async def test_a_named_queue_uses_its_own_keys(
        self, client: redis.Redis, keys: RedisKeys, partitions: int
    ) -> None:
        delay = RedisDelayQueue(client, keys, queue_name="slow", partitions=partitions)
        queue = RedisTaskQueue(client, keys, queue_name="slow", partitions=partitions)
        await queue.ensure_group()
        await delay.schedule(envelope(), due_ms=NOW)

        assert await client.zcard(self.delayed_key(keys, partitions, "x-1", "slow")) == 1
        assert await delay.move_due(now_ms=NOW) == 1

        assert execution_ids(await read_all(queue)) == ["x-1"]
        default = [None] if partitions == 1 else list(range(partitions))
        for k in default:
            assert await client.exists(keys.queue_stream("default", k)) == 0
            assert await client.exists(keys.queue_delayed("default", k)) == 0

    async def test_a_foreign_member_is_moved_as_evidence_not_lost(
        self,
        delay: RawDelayQueue,
        ready: TaskQueue,
        client: redis.Redis,
        keys: RedisKeys,
        partitions: int,
    ) -> None:
        """R4: a member this adapter did not write must neither block the set nor vanish."""
        junk = ["not json", '{"fields": ["odd"]}', '{"fields": [1, 2]}', '{"id": "t"}', "[]"]
        for k in [None] if partitions == 1 else range(partitions):
            # Partition k of a foreign writer's choosing: every one is moved, as evidence.
            await client.zadd(keys.queue_delayed("default", k), dict.fromkeys(junk, NOW))
        junk_moved = junk * partitions
        await delay.schedule(envelope(), due_ms=NOW + 1)

        assert await delay.move_due(now_ms=NOW + 1) == len(junk_moved) + 1

        deliveries = await read_all(ready)
        assert sorted(d.raw["delayed_raw"] for d in deliveries if d.envelope is None) == sorted(
            junk_moved
        )
        assert all(d.problem for d in deliveries if d.envelope is None)
        assert [d.envelope.execution_id for d in deliveries if d.envelope] == ["x-1"]
        assert await delay.pending() == 0


class TestFakeRedisDelayQueue(RedisDelayQueueContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis

    async def test_the_script_is_reloaded_after_a_flush(
        self, delay: RawDelayQueue, ready: TaskQueue, client: redis.Redis
    ) -> None:
        """EVALSHA first; a server that lost its scripts (restart, failover) gets it again."""
        first, second = ONE_PARTITION[:2]
        await delay.schedule(envelope(first), due_ms=NOW)
        assert await delay.move_due(now_ms=NOW) == 1
        await client.script_flush()
        await delay.schedule(envelope(second), due_ms=NOW)

        assert await delay.move_due(now_ms=NOW) == 1

        assert execution_ids(await read_all(ready)) == [first, second]


@pytest.mark.redis
class TestRedisDelayQueue(RedisDelayQueueContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
