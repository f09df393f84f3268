"""Queue partitions (K3, ``--partitions``): what only a partitioned task queue has, on fakeredis,
the single Redis and the Redis Cluster.

An execution's carriers land on one partition; a worker holds one blocking read per
partition open, never a polling loop; ack, dead-letter, touch and reclaim find the carrier's
partition from its id; a change of the partition count is refused until the old layout is
drained. The shared contracts run with three partitions too (``test_task_queue_contract``,
``test_delay_queue_contract``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis
from redis.crc import key_slot

from plaita.adapters.redis.delay_queue import RedisDelayQueue
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.partitions import PartitionCountChangedError, partition_of, split_id

P = 3
NOW = 1_760_000_000_000


def on_partition(partition: int, n: int = 0) -> str:
    """The ``n``-th execution id of ``x-0, x-1, …`` whose carriers land on ``partition``."""
    return [f"x-{i}" for i in range(200) if partition_of(f"x-{i}", P) == partition][n]


def envelope(execution_id: str) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="orders",
        version="1",
        params={},
        now_ms=NOW,
        generations=LEGACY_GENERATIONS,
    )


class CommandSpy:
    """Counts the commands a client sends, and how many XREADGROUP are open per stream."""

    def __init__(self, client: redis.Redis) -> None:
        self.sent: Counter[str] = Counter()
        self.reads: list[tuple[str, bool]] = []  # (stream, blocking)
        self.open: Counter[str] = Counter()
        self.most_open: Counter[str] = Counter()
        original = client.execute_command

        async def spy(*args: Any, **options: Any) -> Any:
            name = str(args[0]).upper()
            self.sent[name] += 1
            if name != "XREADGROUP":
                return await original(*args, **options)
            words = [str(arg) for arg in args]
            stream = words[words.index("STREAMS") + 1]
            self.reads.append((stream, "BLOCK" in words))
            self.open[stream] += 1
            self.most_open[stream] = max(self.most_open[stream], self.open[stream])
            try:
                return await original(*args, **options)
            finally:
                self.open[stream] -= 1

        client.execute_command = spy  # type: ignore[method-assign]

    async def wait_open(self, reads: int) -> None:
        for _ in range(200):
            if sum(self.open.values()) >= reads:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{reads} reads never open: {self.open}")


class PartitionsContract:
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    async def queue(self, client: redis.Redis, keys: RedisKeys) -> AsyncIterator[RedisTaskQueue]:
        queue = RedisTaskQueue(client, keys, partitions=P)
        await queue.ensure_group()
        yield queue
        await queue.close()

    def test_one_partition_keeps_its_keys_in_one_slot(self, keys: RedisKeys) -> None:
        ns = keys.namespace
        assert keys.queue_stream("default", 2) == f"{ns}:q:{{default:p2}}:stream"
        assert keys.queue_dead_letters("default", 2) == f"{ns}:q:{{default:p2}}:dlq"
        assert keys.queue_delayed("default", 2) == f"{ns}:q:{{default:p2}}:delayed"
        assert keys.queue_stream("default") == f"{ns}:q:{{default}}:stream"
        for k in range(P):
            slots = {
                key_slot(key.encode())
                for key in (
                    keys.queue_stream("default", k),
                    keys.queue_dead_letters("default", k),
                    keys.queue_delayed("default", k),
                )
            }
            assert len(slots) == 1

    async def test_an_executions_carriers_always_land_on_its_partition(
        self, queue: RedisTaskQueue, client: redis.Redis, keys: RedisKeys
    ) -> None:
        executions = [f"order-{n}" for n in range(12)]
        for execution_id in executions * 3:
            await queue.enqueue(envelope(execution_id))

        for k in range(P):
            entries = await client.xrange(keys.queue_stream("default", k))
            named = Counter(_execution_of(fields) for _id, fields in entries)
            assert named == Counter({x: 3 for x in executions if partition_of(x, P) == k}), (
                f"partition {k}"
            )
        assert await client.exists(keys.queue_stream("default")) == 0

    async def test_an_idle_worker_holds_one_blocking_read_per_partition(
        self, queue: RedisTaskQueue, client: redis.Redis
    ) -> None:
        spy = CommandSpy(client)

        for _ in range(4):
            assert await queue.read("worker-a", count=10, block_ms=50) == []

        # At most one new read per partition per call, each blocking, never two open on one
        # stream: a polling loop would send hundreds in the same calls.
        assert len(spy.reads) <= 4 * P
        assert len({stream for stream, _ in spy.reads}) == P
        assert all(blocking for _, blocking in spy.reads)
        assert max(spy.most_open.values()) == 1
        assert set(spy.sent) == {"XREADGROUP"}

    async def test_a_carrier_on_any_partition_is_taken_by_the_read_already_open(
        self, queue: RedisTaskQueue, client: redis.Redis
    ) -> None:
        spy = CommandSpy(client)
        got: list[int] = []
        for k in (2, 0, 1):
            reading = asyncio.create_task(queue.read("worker-a", count=10, block_ms=5_000))
            await spy.wait_open(P)
            sent = await queue.enqueue(envelope(on_partition(k)))

            [delivery] = await asyncio.wait_for(reading, timeout=3)

            assert delivery.message_id == sent
            got.append(_partition(delivery.message_id))
        assert got == [2, 0, 1]
        # The first call opened one read per partition; each later call reopened only the
        # one that had returned.
        assert len(spy.reads) == P + 2
        assert max(spy.most_open.values()) == 1
        assert queue._reads.in_flight("worker-a") == P - 1

    async def test_a_read_never_returns_more_than_it_asked_for(self, queue: RedisTaskQueue) -> None:
        for k in range(P):
            for n in range(2):
                await queue.enqueue(envelope(on_partition(k, n)))

        batches = [await queue.read("worker-a", count=2, block_ms=50) for _ in range(3)]

        assert [len(batch) for batch in batches] == [2, 2, 2]
        ids = [d.envelope.execution_id for batch in batches for d in batch if d.envelope]
        assert sorted(ids) == sorted(on_partition(k, n) for k in range(P) for n in range(2))

    async def test_a_buffered_carrier_a_reclaim_takes_is_not_handed_out_again(
        self, queue: RedisTaskQueue
    ) -> None:
        for k in range(P):
            await queue.enqueue(envelope(on_partition(k)))
        [first] = await queue.read("worker-a", count=1, block_ms=50)  # the others wait
        await asyncio.sleep(0.06)

        reclaimed = await queue.reclaim("worker-a", min_idle_ms=50, count=10)

        assert first.message_id in {d.message_id for d in reclaimed}
        assert len(reclaimed) == P
        assert await queue.read("worker-a", count=10, block_ms=50) == []

    async def test_ack_dead_letter_touch_and_reclaim_hit_the_carriers_partition(
        self, queue: RedisTaskQueue, client: redis.Redis, keys: RedisKeys
    ) -> None:
        for k in range(P):
            await queue.enqueue(envelope(on_partition(k)))
        deliveries = await queue.read("worker-a", count=10, block_ms=0)
        by_partition = {_partition(d.message_id): d for d in deliveries}
        assert sorted(by_partition) == [0, 1, 2]

        async def pending() -> list[int]:
            return [
                int(
                    (await client.xpending(keys.queue_stream("default", k), "plaita-workers"))[
                        "pending"
                    ]
                )
                for k in range(P)
            ]

        await queue.ack(by_partition[0].message_id)
        assert await pending() == [0, 1, 1]

        dlq_id = await queue.dead_letter(by_partition[1], "budget spent")
        assert _partition(dlq_id) == 1
        assert [await client.xlen(keys.queue_dead_letters("default", k)) for k in range(P)] == [
            0,
            1,
            0,
        ]
        assert await pending() == [0, 0, 1]
        [letter] = await queue.dead_letters()
        assert (letter.dlq_id, letter.message_id) == (dlq_id, by_partition[1].message_id)

        await asyncio.sleep(0.06)
        [reclaimed] = await queue.reclaim("rescuer", min_idle_ms=50, count=10)
        assert reclaimed.message_id == by_partition[2].message_id
        assert reclaimed.delivery_count == 2
        assert await queue.touch("rescuer", [reclaimed.message_id, "1-1"]) == 1
        await queue.ack(reclaimed.message_id)
        assert await pending() == [0, 0, 0]

    async def test_the_dlq_of_every_partition_is_counted_and_listed(
        self, queue: RedisTaskQueue
    ) -> None:
        for k in range(P):
            await queue.enqueue(envelope(on_partition(k)))
        for delivery in await queue.read("worker-a", count=10, block_ms=0):
            await queue.dead_letter(delivery, "budget spent")

        assert await queue.dead_letter_length() == P
        letters = await queue.dead_letters()
        assert sorted(_partition(letter.dlq_id) for letter in letters) == [0, 1, 2]
        assert len(await queue.dead_letters(count=2)) == 2
        stats = await queue.stats()
        assert (stats.length, stats.pending, stats.oldest_unread_ms) == (P, 0, None)

    async def test_an_operators_dlq_key_is_split_by_partition_too(
        self, client: redis.Redis, keys: RedisKeys
    ) -> None:
        named = f"{keys.namespace}:{{default}}:dead"
        queue = RedisTaskQueue(client, keys, dead_letter_key=named, partitions=P)
        await queue.ensure_group()
        await queue.enqueue(envelope(on_partition(2)))
        [delivery] = await queue.read("worker-a", count=1, block_ms=0)

        await queue.dead_letter(delivery, "budget spent")

        assert await client.xlen(f"{keys.namespace}:{{default:p2}}:dead") == 1
        assert await client.exists(named) == 0
        assert await queue.dead_letter_length() == 1

    async def test_each_partitions_delay_set_moves_into_its_own_stream(
        self, queue: RedisTaskQueue, client: redis.Redis, keys: RedisKeys
    ) -> None:
        delay = RedisDelayQueue(client, keys, partitions=P)
        for k in range(P):
            await delay.schedule(envelope(on_partition(k)), due_ms=NOW)
        assert [await client.zcard(keys.queue_delayed("default", k)) for k in range(P)] == [1] * P
        assert await delay.pending() == P

        assert await delay.move_due(now_ms=NOW, limit=2) == 2
        assert await delay.move_due(now_ms=NOW) == 1

        for k in range(P):
            [(_id, fields)] = await client.xrange(keys.queue_stream("default", k))
            assert _execution_of(fields) == on_partition(k)
        assert await client.exists(keys.queue_delayed("default")) == 0

    async def test_an_idle_timer_tick_runs_no_script(
        self, client: redis.Redis, keys: RedisKeys
    ) -> None:
        delay = RedisDelayQueue(client, keys, partitions=P)
        await delay.schedule(envelope(on_partition(2)), due_ms=NOW + 1_000)
        spy = CommandSpy(client)

        assert await delay.move_due(now_ms=NOW) == 0
        assert spy.sent == Counter(), "one pipelined peek, no script per partition"

        assert await delay.move_due(now_ms=NOW + 1_000) == 1
        # The one partition with a due carrier: EVALSHA (again after loading the script).
        assert set(spy.sent) <= {"EVALSHA", "SCRIPT LOAD"} and spy.sent["EVALSHA"] in (1, 2)

    # --- a change of the partition count (W12) -------------------------------------------

    async def test_the_first_start_records_the_partition_count(
        self, queue: RedisTaskQueue, client: redis.Redis, keys: RedisKeys
    ) -> None:
        assert _text(await client.get(keys.queue_partitions("default"))) == str(P)

    async def test_one_partition_writes_no_record(
        self, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await RedisTaskQueue(client, keys).ensure_group()
        assert await client.exists(keys.queue_partitions("default")) == 0

    async def test_a_change_is_refused_until_the_old_layout_is_drained(
        self, client: redis.Redis, keys: RedisKeys
    ) -> None:
        old = RedisTaskQueue(client, keys)
        await old.ensure_group()
        await old.enqueue(envelope("x-1"))
        await old.enqueue(envelope("x-2"))
        new = RedisTaskQueue(client, keys, partitions=P)

        with pytest.raises(PartitionCountChangedError) as refused:
            await new.ensure_group()
        assert "1 partition(s) and 2 carrier(s)" in str(refused.value)
        assert "--partitions 1" in str(refused.value)

        first, second = await old.read("worker-a", count=10, block_ms=0)
        await old.ack(first.message_id)
        with pytest.raises(PartitionCountChangedError, match="1 carrier"):
            await new.ensure_group()  # one still pending

        await old.ack(second.message_id)
        await new.ensure_group()
        assert _text(await client.get(keys.queue_partitions("default"))) == str(P)

    async def test_a_delayed_carrier_holds_the_layout_too(
        self, queue: RedisTaskQueue, client: redis.Redis, keys: RedisKeys
    ) -> None:
        delay = RedisDelayQueue(client, keys, partitions=P)
        await delay.schedule(envelope(on_partition(1)), due_ms=NOW)
        back = RedisTaskQueue(client, keys)

        with pytest.raises(PartitionCountChangedError, match=f"{P} partition"):
            await back.ensure_group()

        await delay.move_due(now_ms=NOW)
        [delivery] = await queue.read("worker-a", count=10, block_ms=0)
        await queue.ack(delivery.message_id)
        await back.ensure_group()
        assert _text(await client.get(keys.queue_partitions("default"))) == "1"


class TestFakeRedisPartitions(PartitionsContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisPartitions(PartitionsContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


def _partition(message_id: str) -> int:
    where = split_id(message_id, P)
    assert where is not None
    return where[0]


def _text(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else None if value is None else str(value)


def _execution_of(fields: Any) -> str:
    import json

    decoded = {_text(k): _text(v) for k, v in fields.items()}
    return str(json.loads(decoded["envelope"] or "{}")["execution_id"])
