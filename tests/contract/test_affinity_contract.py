"""Affinity over every queue and registry adapter (W25): the memory twin, fakeredis, and real
Redis on a single node and on the Redis Cluster, with one partition and with three.

Affinity adds no key and no script: a hand-over is an ordinary enqueue on the task stream
followed by the original's ack, and the target is judged by its registry record. What each
adapter must do for it is carry the two envelope fields unchanged and answer the target's
record as written; the gate is run here on the adapters themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.registry import MemoryWorkerRegistry
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.registry import RedisWorkerRegistry
from plaita.application.ports import Delivery, TaskQueue, WorkerInstance, WorkerRegistry
from plaita.application.use_cases.step import Carrier, DispatchResult, Disposition, StepSettings
from plaita.application.use_cases.step.affinity import AffinityGate
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope, copy_envelope

from .conftest import FakeClock

A, B = "worker-a", "worker-b"
TTL_MS = 30_000


def targeted(execution_id: str = "x-1", handovers: int = 0) -> TaskEnvelope:
    envelope = TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="orders",
        version="1",
        params={"order": 7},
        now_ms=1_760_000_000_000,
        generations=LEGACY_GENERATIONS,
        target_instance_id=B,
    )
    return copy_envelope(envelope, handovers=handovers)


class AffinityContract:
    @pytest.fixture
    def queue(self) -> TaskQueue:
        raise NotImplementedError

    @pytest.fixture
    def registry(self) -> WorkerRegistry:
        raise NotImplementedError

    @pytest.fixture
    async def ready(self, queue: TaskQueue) -> TaskQueue:
        await queue.ensure_group()
        return queue

    def gate(
        self, queue: TaskQueue, registry: WorkerRegistry, clock: FakeClock, holder: str = A
    ) -> AffinityGate:
        return AffinityGate(
            registry=registry,
            queue=queue,
            executions=MemoryExecutionRepository(MemoryLeaseManager(clock)),
            clock=clock,
            settings=StepSettings(holder_id=holder, generations=LEGACY_GENERATIONS),
        )

    async def route_one(
        self,
        queue: TaskQueue,
        registry: WorkerRegistry,
        clock: FakeClock,
        *,
        reader: str = A,
        handovers: int = 0,
    ) -> tuple[Delivery, DispatchResult | None]:
        """Enqueue a carrier for worker-b, read it as ``reader`` and route it there."""
        await queue.enqueue(targeted(handovers=handovers))
        [delivery] = await queue.read(reader, count=1, block_ms=0)
        assert delivery.envelope is not None
        result = await self.gate(queue, registry, clock, reader).route(
            Carrier(delivery.envelope, delivery.message_id)
        )
        return delivery, result

    async def register(self, registry: WorkerRegistry, clock: FakeClock, status: str) -> None:
        now = clock.now_ms()
        await registry.put(WorkerInstance(B, status, now, now), ttl_ms=TTL_MS)

    async def test_a_target_and_its_count_travel_unchanged(self, ready: TaskQueue) -> None:
        sent = targeted(handovers=5)
        await ready.enqueue(sent)

        [delivery] = await ready.read(A, count=1, block_ms=0)

        assert delivery.envelope == sent
        assert (delivery.envelope.target_instance_id, delivery.envelope.handovers) == (B, 5)

    async def test_a_hand_over_enqueues_the_copy_and_leaves_the_ack_to_the_worker(
        self, ready: TaskQueue, registry: WorkerRegistry, clock: FakeClock
    ) -> None:
        await self.register(registry, clock, "running")

        delivery, result = await self.route_one(ready, registry, clock)

        assert result is not None
        assert (result.disposition, result.outcome) == (Disposition.ACK, "handed_over")
        assert (await ready.stats()).pending == 1, "the original waits for the worker's ack"
        [copy] = await ready.read(B, count=1, block_ms=0)
        assert copy.envelope is not None
        assert (copy.envelope.target_instance_id, copy.envelope.handovers) == (B, 1)
        assert copy.envelope.execution_id == "x-1"
        await ready.ack(delivery.message_id)
        await ready.ack(copy.message_id)
        assert (await ready.stats()).pending == 0

    @pytest.mark.parametrize("status", ["draining", "stopping", "stopped", "starting"])
    async def test_a_target_whose_record_is_not_running_is_stripped(
        self, ready: TaskQueue, registry: WorkerRegistry, clock: FakeClock, status: str
    ) -> None:
        await self.register(registry, clock, status)

        _, result = await self.route_one(ready, registry, clock)

        assert result is not None and result.outcome == "target_stripped"
        [copy] = await ready.read(A, count=1, block_ms=0)
        assert copy.envelope is not None and copy.envelope.target_instance_id is None

    async def test_a_target_without_a_record_is_stripped(
        self, ready: TaskQueue, registry: WorkerRegistry, clock: FakeClock
    ) -> None:
        _, result = await self.route_one(ready, registry, clock)

        assert result is not None and result.outcome == "target_stripped"
        assert "target_absent" in result.detail

    async def test_the_target_itself_runs_its_carrier(
        self, ready: TaskQueue, registry: WorkerRegistry, clock: FakeClock
    ) -> None:
        _, result = await self.route_one(ready, registry, clock, reader=B, handovers=3)

        assert result is None
        assert (await ready.stats()).length == 1, "no copy"


class TestMemoryAffinity(AffinityContract):
    @pytest.fixture
    def queue(self, clock: FakeClock) -> TaskQueue:
        return MemoryTaskQueue(clock)

    @pytest.fixture
    def registry(self, clock: FakeClock) -> WorkerRegistry:
        return MemoryWorkerRegistry(clock)


class RedisAffinityContract(AffinityContract):
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
    def registry(self, client: redis.Redis, keys: RedisKeys) -> WorkerRegistry:
        return RedisWorkerRegistry(client, keys)


class TestFakeRedisAffinity(RedisAffinityContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisAffinity(RedisAffinityContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
