"""The DLQ length cap (W10, S5): a lossy FIFO. Every dead-letter write trims the DLQ to the
cap in the same atomic step and counts what it dropped; the newest entries are kept. Run on
memory, fakeredis (bytes and str) and real Redis.
"""

from __future__ import annotations

import json

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.application.ports import Clock, TaskQueue
from plaita.domain.config_generations import DEFAULT_DLQ_MAX_LEN
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope

CAP = 3


def carrier(n: int) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=f"x-{n}",
        flow_id="orders",
        version="1",
        params={},
        now_ms=1_760_000_000_000,
        generations=LEGACY_GENERATIONS,
    )


class DlqCapContract:
    @pytest.fixture
    def build(self) -> object:
        """A queue with this DLQ cap: ``build(cap)``."""
        raise NotImplementedError

    @pytest.fixture
    async def queue(self, build: object) -> TaskQueue:
        queue: TaskQueue = build(CAP)  # type: ignore[operator]
        await queue.ensure_group()
        return queue

    async def _dead_letter(self, queue: TaskQueue, count: int) -> list[str]:
        for n in range(count):
            await queue.enqueue(carrier(n))
        return [
            await queue.dead_letter(delivery, f"reason {n}")
            for n, delivery in enumerate(await queue.read("w1", count=count, block_ms=0))
        ]

    async def test_the_dlq_keeps_the_newest_entries_up_to_its_cap(self, queue: TaskQueue) -> None:
        await self._dead_letter(queue, CAP + 2)

        letters = await queue.dead_letters(count=100)

        assert [json.loads(letter.raw["envelope"])["execution_id"] for letter in letters] == [
            "x-4",
            "x-3",
            "x-2",
        ]

    async def test_what_the_cap_dropped_is_counted(self, queue: TaskQueue) -> None:
        assert await queue.dead_letters_dropped() == 0
        await self._dead_letter(queue, CAP)
        assert await queue.dead_letters_dropped() == 0

        await self._dead_letter(queue, 2)

        assert await queue.dead_letters_dropped() == 2

    async def test_the_dlq_length_stays_at_the_cap(self, queue: TaskQueue) -> None:
        await self._dead_letter(queue, CAP - 1)
        assert await queue.dead_letter_length() == CAP - 1

        await self._dead_letter(queue, CAP + 2)

        assert await queue.dead_letter_length() == CAP

    async def test_a_dropped_dead_letter_was_still_acked(self, queue: TaskQueue) -> None:
        """The carrier leaves the stream's pending list whether or not its copy is kept."""
        await self._dead_letter(queue, CAP + 1)

        assert (await queue.stats()).pending == 0

    async def test_the_default_cap_is_ten_thousand(self) -> None:
        assert DEFAULT_DLQ_MAX_LEN == 10_000

    def test_a_cap_must_be_positive(self, build: object) -> None:
        with pytest.raises(ValueError, match="DLQ length cap"):
            build(0)  # type: ignore[operator]


class TestMemoryDlqCap(DlqCapContract):
    @pytest.fixture
    def build(self, clock: Clock) -> object:
        return lambda cap: MemoryTaskQueue(clock, dead_letter_max_len=cap)


class RedisDlqCap(DlqCapContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def build(self, client: redis.Redis, keys: RedisKeys) -> object:
        return lambda cap: RedisTaskQueue(client, keys, dead_letter_max_len=cap)

    async def test_the_dlq_stream_holds_exactly_the_cap(
        self, queue: TaskQueue, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """XTRIM MAXLEN = cap (no ~) inside the MULTI/EXEC of the copy and its ack."""
        await self._dead_letter(queue, CAP + 5)

        assert await client.xlen(keys.queue_dead_letters("default")) == CAP


class TestFakeRedisDlqCap(RedisDlqCap):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisDlqCap(RedisDlqCap):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
