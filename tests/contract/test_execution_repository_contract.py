"""ExecutionRepository contract (S1, S2, W4), run against every adapter family."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import attrs
import fakeredis
import pytest
import redis.asyncio as redis
from redis.asyncio.connection import Connection

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.application.ports import Clock, ExecutionRepository, LeaseManager
from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.execution import (
    ExecutionError,
    ExecutionState,
    ExecutionStatus,
    Suspension,
)

NOW_MS = 1_760_000_000_000
Store = Callable[[ExecutionState], Awaitable[None]]
ConnectionT = TypeVar("ConnectionT", bound=Connection)


def state(
    execution_id: str = "x:1",
    *,
    flow_id: str = "orders",
    status: ExecutionStatus = ExecutionStatus.RUNNING,
    updated_at_ms: int = NOW_MS,
) -> ExecutionState:
    started = ExecutionState.new(
        execution_id=execution_id,
        flow_id=flow_id,
        flow_version="1",
        fingerprint="f" * 64,
        start_node_id="a",
        input={"order": 7},
        now_ms=NOW_MS,
    )
    return attrs.evolve(started, status=status, updated_at_ms=updated_at_ms)


class ExecutionRepositoryContract:
    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def repository(self, leases: LeaseManager) -> ExecutionRepository:
        raise NotImplementedError

    @pytest.fixture
    def store(self, leases: LeaseManager, repository: ExecutionRepository) -> Store:
        async def store(saved: ExecutionState) -> None:
            lease = await leases.acquire(saved.execution_id, "w1", ttl_ms=10_000)
            assert lease is not None
            await repository.save(saved, fence=lease.generation)
            await leases.release(lease)

        return store

    async def test_save_under_the_current_fence_lands(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        first = state()
        second = first.transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 1, steps=1)

        await repository.save(first, fence=lease.generation)
        assert await repository.load("x:1") == first
        await repository.save(second, fence=lease.generation)
        assert await repository.load("x:1") == second

    async def test_save_with_a_stale_fence_raises_and_keeps_the_stored_state(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """W4: a holder that lost its lease can never write over the one that replaced it."""
        old = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert old is not None
        kept = state()
        await repository.save(kept, fence=old.generation)
        await leases.release(old)
        await leases.acquire("x:1", "w2", ttl_ms=10_000)
        late = kept.transition(ExecutionStatus.COMPLETED, now_ms=NOW_MS + 5, result="late")

        with pytest.raises(ExecutionLeaseError, match=r"x:1.*fence 1.*generation is 2"):
            await repository.save(late, fence=old.generation)

        assert await repository.load("x:1") == kept

    async def test_save_with_a_fence_never_handed_out_raises(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None

        with pytest.raises(ExecutionLeaseError, match="fence 2"):
            await repository.save(state(), fence=lease.generation + 1)
        assert await repository.load("x:1") is None

    async def test_save_without_any_lease_raises_and_writes_nothing(
        self, repository: ExecutionRepository
    ) -> None:
        with pytest.raises(ExecutionLeaseError, match="generation is None"):
            await repository.save(state(), fence=1)

        assert await repository.load("x:1") is None
        assert list(await repository.list()) == []

    async def test_load_of_an_unknown_id_is_none(self, repository: ExecutionRepository) -> None:
        assert await repository.load("nobody") is None

    async def test_every_field_round_trips(
        self, repository: ExecutionRepository, store: Store
    ) -> None:
        full = attrs.evolve(
            state(),
            status=ExecutionStatus.ERROR,
            tenant_id="acme",
            variables={"nested": {"list": [1, 2.5, None, "ü"]}, "flag": True},
            node_results={"a": {"ok": 1}},
            next_node_id=None,
            last_node_id="a",
            last_branch="then",
            suspension=Suspension(node_id="wait", subscription_id="s:1", wake_at_ms=NOW_MS + 9),
            result=[1, "two"],
            error=ExecutionError(code=500, message="boom", node_id="a"),
            steps=3,
        )
        await store(full)

        assert await repository.load("x:1") == full

    async def test_loaded_state_is_a_copy(
        self, repository: ExecutionRepository, store: Store
    ) -> None:
        await store(attrs.evolve(state(), variables={"items": [1]}))

        loaded = await repository.load("x:1")
        assert loaded is not None
        loaded.variables["items"].append(2)

        again = await repository.load("x:1")
        assert again is not None and again.variables == {"items": [1]}

    async def test_list_filters_by_flow_and_status_newest_first(
        self, repository: ExecutionRepository, store: Store
    ) -> None:
        running, suspended = ExecutionStatus.RUNNING, ExecutionStatus.SUSPENDED
        await store(state("x:1", flow_id="orders", status=running, updated_at_ms=NOW_MS + 1))
        await store(state("x:2", flow_id="orders", status=suspended, updated_at_ms=NOW_MS + 4))
        await store(state("x:3", flow_id="billing", status=running, updated_at_ms=NOW_MS + 3))
        await store(state("x:4", flow_id="orders", status=running, updated_at_ms=NOW_MS + 2))

        def ids(states: object) -> list[str]:
            return [s.execution_id for s in states]  # type: ignore[attr-defined]

        assert ids(await repository.list()) == ["x:2", "x:3", "x:4", "x:1"]
        assert ids(await repository.list(flow_id="orders")) == ["x:2", "x:4", "x:1"]
        assert ids(await repository.list(status=running)) == ["x:3", "x:4", "x:1"]
        assert ids(await repository.list(flow_id="orders", status=running)) == ["x:4", "x:1"]
        assert ids(await repository.list(flow_id="orders", limit=2)) == ["x:2", "x:4"]
        assert ids(await repository.list(flow_id="shipping")) == []

    async def test_list_orders_by_the_last_update(
        self, repository: ExecutionRepository, store: Store
    ) -> None:
        await store(state("x:1", updated_at_ms=NOW_MS + 1))
        await store(state("x:2", updated_at_ms=NOW_MS + 2))
        await store(state("x:1", updated_at_ms=NOW_MS + 3))

        assert [s.execution_id for s in await repository.list()] == ["x:1", "x:2"]


class TestMemoryExecutionRepository(ExecutionRepositoryContract):
    @pytest.fixture
    def leases(self, clock: Clock) -> LeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def repository(self, leases: LeaseManager) -> ExecutionRepository:
        return MemoryExecutionRepository(leases)


class RedisRoundTrips:
    """Redis only: the fenced save and its index update travel in one round trip."""

    @pytest.fixture
    def sent(self) -> list[bytes]:
        return []

    @pytest.fixture
    def counting_client(self, sent: list[bytes]) -> redis.Redis:
        raise NotImplementedError

    async def test_save_is_one_round_trip(
        self, counting_client: redis.Redis, keys: RedisKeys, sent: list[bytes]
    ) -> None:
        leases = RedisLeaseManager(counting_client, keys)
        repository = RedisExecutionRepository(counting_client, keys)
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.save(state(), fence=lease.generation)  # loads the script once
        sent.clear()

        await repository.save(state(updated_at_ms=NOW_MS + 1), fence=lease.generation)

        assert len(sent) == 1
        with pytest.raises(ExecutionLeaseError):
            await repository.save(state(), fence=lease.generation + 1)
        assert len(sent) == 2


def counting(base: type[ConnectionT], sent: list[bytes]) -> type[ConnectionT]:
    """``base`` counting its writes to the socket: one per round trip (a pipeline is one)."""

    class CountingConnection(base):  # type: ignore[valid-type, misc]
        async def send_packed_command(self, command: object, check_health: bool = True) -> None:
            sent.append(b"")
            await super().send_packed_command(command, check_health)

    return CountingConnection


class TestFakeRedisExecutionRepository(ExecutionRepositoryContract, RedisRoundTrips):
    @pytest.fixture
    def leases(self, fake_redis: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(fake_redis, keys)

    @pytest.fixture
    def repository(self, fake_redis: redis.Redis, keys: RedisKeys) -> ExecutionRepository:
        return RedisExecutionRepository(fake_redis, keys)

    @pytest.fixture
    async def counting_client(self, sent: list[bytes]) -> AsyncIterator[redis.Redis]:
        client = fakeredis.FakeAsyncRedis(
            server=fakeredis.FakeServer(),
            connection_class=counting(fakeredis.FakeAsyncRedisConnection, sent),
        )
        yield client
        await client.aclose()


@pytest.mark.redis
class TestRedisExecutionRepository(ExecutionRepositoryContract, RedisRoundTrips):
    @pytest.fixture
    def leases(self, real_redis: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(real_redis, keys)

    @pytest.fixture
    def repository(self, real_redis: redis.Redis, keys: RedisKeys) -> ExecutionRepository:
        return RedisExecutionRepository(real_redis, keys)

    @pytest.fixture
    async def counting_client(
        self, real_redis: redis.Redis, sent: list[bytes]
    ) -> AsyncIterator[redis.Redis]:
        # real_redis first: it skips when the URL is unset and cleans the namespace up after.
        client = redis.Redis.from_url(
            os.environ["PLAITA_TEST_REDIS_URL"], connection_class=counting(Connection, sent)
        )
        yield client
        await client.aclose()

    async def test_a_fresh_server_script_cache_is_reloaded(
        self, leases: LeaseManager, repository: ExecutionRepository, real_redis: redis.Redis
    ) -> None:
        """A Redis restart or failover empties the script cache; save must survive NOSCRIPT."""
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await real_redis.script_flush()

        await repository.save(state(), fence=lease.generation)

        assert await repository.load("x:1") == state()
