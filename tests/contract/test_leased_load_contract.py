"""LeasedLoad (W3, S1): the lease, then the checkpoint read under it.

One suite for the memory twin and SQL (``SequentialLeasedLoad`` over their lease manager and
store) and for Redis (one script), on fakeredis and the real single node and cluster.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.leased_load import RedisLeasedLoad
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.application.leased_load import SequentialLeasedLoad
from plaita.application.ports import Clock, ExecutionRepository, LeasedLoad, LeaseManager
from plaita.domain.execution import ExecutionState, ExecutionStatus, NodeTiming

from .sql_fixtures import PostgresEngine, SqliteEngine, SqlStores

TTL_MS = 10_000


def checkpoint(updated_at_ms: int = 1_000) -> ExecutionState:
    return ExecutionState(
        execution_id="x:1",
        flow_id="flow",
        flow_version="1",
        fingerprint="f" * 64,
        status=ExecutionStatus.RUNNING,
        created_at_ms=1_000,
        updated_at_ms=updated_at_ms,
        input={"order": 7},
        variables={"total": 3},
        node_results={"a": {"ok": True}},
        node_timings={"a": NodeTiming(1_000, 1_001)},
        next_node_id="b",
        last_node_id="a",
        steps=1,
    )


class LeasedLoadContract:
    @pytest.fixture
    def leased_load(self) -> LeasedLoad:
        raise NotImplementedError

    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def repository(self) -> ExecutionRepository:
        raise NotImplementedError

    async def test_a_free_lease_is_taken_and_the_checkpoint_read(
        self, leased_load: LeasedLoad, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        await repository.accept(checkpoint())

        lease, state = await leased_load.acquire_and_load("x:1", "w1", ttl_ms=TTL_MS)

        assert lease is not None and lease.holder_id == "w1"
        assert await leases.holder("x:1") == lease
        assert await leases.current_generation("x:1") == lease.generation
        assert state == checkpoint()

    async def test_an_execution_without_a_checkpoint_is_leased_and_read_as_none(
        self, leased_load: LeasedLoad, leases: LeaseManager
    ) -> None:
        lease, state = await leased_load.acquire_and_load("x:1", "w1", ttl_ms=TTL_MS)

        assert lease is not None and state is None
        assert await leases.holder("x:1") == lease

    async def test_a_held_lease_gives_nothing_and_moves_no_generation(
        self, leased_load: LeasedLoad, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        await repository.accept(checkpoint())
        held = await leases.acquire("x:1", "w1", ttl_ms=TTL_MS)
        assert held is not None

        assert await leased_load.acquire_and_load("x:1", "w2", ttl_ms=TTL_MS) == (None, None)
        assert await leases.holder("x:1") == held
        assert await leases.current_generation("x:1") == held.generation

    async def test_the_read_sees_the_last_save_of_the_holder_that_let_go(
        self, leased_load: LeasedLoad, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        await repository.accept(checkpoint())
        first = await leases.acquire("x:1", "w1", ttl_ms=TTL_MS)
        assert first is not None
        await repository.save(
            checkpoint(updated_at_ms=2_000), fence=first.generation, previous=checkpoint()
        )
        await leases.release(first)

        lease, state = await leased_load.acquire_and_load("x:1", "w2", ttl_ms=TTL_MS)

        assert lease is not None and lease.generation > first.generation
        assert state == checkpoint(updated_at_ms=2_000)

    async def test_of_concurrent_takers_one_gets_the_lease_and_the_checkpoint(
        self, leased_load: LeasedLoad, repository: ExecutionRepository
    ) -> None:
        await repository.accept(checkpoint())

        taken = await asyncio.gather(
            *(leased_load.acquire_and_load("x:1", f"w{n}", ttl_ms=TTL_MS) for n in range(6))
        )

        winners = [(lease, state) for lease, state in taken if lease is not None]
        assert len(winners) == 1 and winners[0][1] == checkpoint()
        assert [pair for pair in taken if pair[0] is None] == [(None, None)] * 5

    @pytest.mark.parametrize("ttl_ms", [0, -1])
    async def test_a_ttl_that_is_not_positive_is_refused(
        self, leased_load: LeasedLoad, ttl_ms: int
    ) -> None:
        with pytest.raises(ValueError, match="positive"):
            await leased_load.acquire_and_load("x:1", "w1", ttl_ms=ttl_ms)


class _FailingLoads:
    """An execution store whose reads fail (an outage after the grant)."""

    def __init__(self, store: ExecutionRepository) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def load(self, execution_id: str) -> ExecutionState | None:
        raise ConnectionError(f"the store did not answer the read of {execution_id}")


class TestMemoryLeasedLoad(LeasedLoadContract):
    @pytest.fixture
    def leases(self, clock: Clock) -> MemoryLeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def repository(self, leases: MemoryLeaseManager) -> ExecutionRepository:
        return MemoryExecutionRepository(leases)

    @pytest.fixture
    def leased_load(self, leases: LeaseManager, repository: ExecutionRepository) -> LeasedLoad:
        return SequentialLeasedLoad(leases, repository)

    async def test_a_read_that_fails_after_the_grant_gives_the_lease_back(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        failing = SequentialLeasedLoad(leases, _FailingLoads(repository))  # type: ignore[arg-type]

        with pytest.raises(ConnectionError, match="did not answer"):
            await failing.acquire_and_load("x:1", "w1", ttl_ms=TTL_MS)

        assert await leases.holder("x:1") is None
        assert await leases.current_generation("x:1") is not None


class RedisLeasedLoads(LeasedLoadContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def leases(self, client: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(client, keys)

    @pytest.fixture
    def repository(self, client: redis.Redis, keys: RedisKeys) -> ExecutionRepository:
        return RedisExecutionRepository(client, keys)

    @pytest.fixture
    def leased_load(self, client: redis.Redis, keys: RedisKeys) -> LeasedLoad:
        return RedisLeasedLoad(client, keys)

    async def test_a_checkpoint_that_cannot_be_read_gives_the_lease_back(
        self, leased_load: LeasedLoad, leases: LeaseManager, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await client.hset(keys.execution_state("x:1"), "status", "{not json")

        with pytest.raises(ValueError):
            await leased_load.acquire_and_load("x:1", "w1", ttl_ms=TTL_MS)

        assert await leases.holder("x:1") is None
        assert await leases.current_generation("x:1") is not None


class TestFakeRedisLeasedLoad(RedisLeasedLoads):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisLeasedLoad(RedisLeasedLoads):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


class SqlLeasedLoads(SqlStores, LeasedLoadContract):
    @pytest.fixture
    def leased_load(self, leases: LeaseManager, repository: ExecutionRepository) -> LeasedLoad:
        return SequentialLeasedLoad(leases, repository)


class TestSqliteLeasedLoad(SqliteEngine, SqlLeasedLoads):
    pass


class TestPostgresLeasedLoad(PostgresEngine, SqlLeasedLoads):
    pass
