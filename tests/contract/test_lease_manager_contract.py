"""LeaseManager contract (W3, W4), run against every adapter family."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as redis
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.sqlalchemy import schema as sql_schema
from plaita.application.ports import Clock, LeaseManager
from plaita.domain.lease import Lease

from .sql_fixtures import PostgresEngine, SqliteEngine, SqlStores

Elapse = Callable[[int], Awaitable[None]]


class LeaseContract:
    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def test_acquire_hands_out_a_new_generation_each_time(self, leases: LeaseManager) -> None:
        """W4: generations come from a counter that release never resets."""
        generations = []
        for holder in ("w1", "w2", "w1"):
            lease = await leases.acquire("x:1", holder, ttl_ms=10_000)
            assert lease is not None and lease.holder_id == holder
            generations.append(lease.generation)
            assert await leases.release(lease)

        # Strictly increasing; the Redis families may skip ahead (a clock floor, ADR 0019).
        assert generations == sorted(set(generations)) and generations[0] >= 1
        assert await leases.current_generation("x:1") == generations[-1]
        assert await leases.holder("x:1") is None

    async def test_generations_are_counted_per_execution(self, leases: LeaseManager) -> None:
        first = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        other = await leases.acquire("x:2", "w1", ttl_ms=10_000)

        assert first is not None and other is not None
        assert await leases.release(first)
        again = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert again is not None and again.generation > first.generation
        assert await leases.current_generation("x:2") == other.generation

    async def test_no_generation_before_the_first_acquire(self, leases: LeaseManager) -> None:
        assert await leases.current_generation("never") is None
        assert await leases.holder("never") is None

    async def test_second_acquire_while_held_returns_none(self, leases: LeaseManager) -> None:
        """W3: one holder at a time; the loser gets no generation."""
        held = await leases.acquire("x:1", "w1", ttl_ms=10_000)

        assert await leases.acquire("x:1", "w2", ttl_ms=10_000) is None
        assert await leases.acquire("x:1", "w1", ttl_ms=10_000) is None
        assert held is not None and await leases.holder("x:1") == held
        assert await leases.current_generation("x:1") == held.generation

    async def test_holder_id_may_contain_the_separator(self, leases: LeaseManager) -> None:
        held = await leases.acquire("x:1", "host|pid:42", ttl_ms=10_000)

        assert held is not None
        assert await leases.holder("x:1") == Lease("x:1", "host|pid:42", held.generation)

    async def test_renew_by_the_holder_extends_the_lease(
        self, leases: LeaseManager, elapse: Elapse
    ) -> None:
        held = await leases.acquire("x:1", "w1", ttl_ms=300)
        assert held is not None
        await elapse(200)

        assert await leases.renew(held, ttl_ms=300)
        await elapse(200)

        assert await leases.holder("x:1") == held

    async def test_stale_lease_cannot_renew_or_release(self, leases: LeaseManager) -> None:
        """W4: renew and release compare the exact holder and generation."""
        stale = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert stale is not None and await leases.release(stale)
        current = await leases.acquire("x:1", "w1", ttl_ms=10_000)

        assert not await leases.renew(stale, ttl_ms=10_000)
        assert not await leases.release(stale)
        assert await leases.holder("x:1") == current

    async def test_other_holder_cannot_renew_or_release(self, leases: LeaseManager) -> None:
        current = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert current is not None
        impostor = Lease("x:1", "w2", current.generation)

        assert not await leases.renew(impostor, ttl_ms=10_000)
        assert not await leases.release(impostor)
        assert await leases.holder("x:1") == current

    async def test_lease_expires_after_its_ttl(self, leases: LeaseManager, elapse: Elapse) -> None:
        """W3: a crashed holder's lease lapses and the next holder gets a new generation."""
        lapsed = await leases.acquire("x:1", "w1", ttl_ms=100)
        assert lapsed is not None
        await elapse(150)

        assert await leases.holder("x:1") is None
        assert not await leases.renew(lapsed, ttl_ms=10_000)
        assert not await leases.release(lapsed)
        taken = await leases.acquire("x:1", "w2", ttl_ms=10_000)
        assert taken is not None and taken.holder_id == "w2"
        assert taken.generation > lapsed.generation

    async def test_release_lets_another_holder_acquire(self, leases: LeaseManager) -> None:
        first = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert first is not None and await leases.release(first)

        second = await leases.acquire("x:1", "w2", ttl_ms=10_000)
        assert second is not None and second.holder_id == "w2"
        assert second.generation > first.generation

    @pytest.mark.parametrize("ttl_ms", [0, -5])
    async def test_a_ttl_must_be_positive(self, leases: LeaseManager, ttl_ms: int) -> None:
        with pytest.raises(ValueError, match="positive"):
            await leases.acquire("x:1", "w1", ttl_ms=ttl_ms)
        held = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert held is not None
        with pytest.raises(ValueError, match="positive"):
            await leases.renew(held, ttl_ms=ttl_ms)


class TestMemoryLeaseManager(LeaseContract):
    @pytest.fixture
    def leases(self, clock: Clock) -> LeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestFakeRedisLeaseManager(LeaseContract):
    @pytest.fixture
    def leases(self, fake_redis: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(fake_redis, keys)


@pytest.mark.redis
class TestRedisLeaseManager(LeaseContract):
    @pytest.fixture
    def leases(self, real_redis: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(real_redis, keys)

    async def test_lease_value_and_fence_counter_follow_the_key_schema(
        self, leases: LeaseManager, real_redis: redis.Redis, keys: RedisKeys
    ) -> None:
        """The fence counter has no TTL and survives release; the lease carries a PX TTL."""
        held = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert held is not None
        lease_ttl = await real_redis.pttl(keys.lease("x:1"))
        assert 0 < lease_ttl <= 10_000
        await leases.release(held)

        assert await real_redis.get(keys.lease("x:1")) is None
        assert int(await real_redis.get(keys.fence_generation("x:1"))) == held.generation
        assert await real_redis.pttl(keys.fence_generation("x:1")) == -1


class SqlLeases(SqlStores, LeaseContract):
    """Leases expire on the injected clock's wall time: the fake clock moves, nothing sleeps."""

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock

    async def test_the_generation_counter_outlives_release_and_expiry(
        self, leases: LeaseManager, engine: AsyncEngine, elapse: Elapse
    ) -> None:
        """W4: the lease row is never deleted; release and expiry only clear the holder."""
        released = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert released is not None and await leases.release(released)
        await leases.acquire("x:1", "w2", ttl_ms=100)
        await elapse(100)

        async with engine.connect() as connection:
            rows = (await connection.execute(sa.select(sql_schema.leases))).all()
        assert [(row.execution_id, row.generation, row.holder_id) for row in rows] == [
            ("x:1", 2, "w2")
        ]
        assert await leases.holder("x:1") is None
        assert await leases.current_generation("x:1") == 2

    async def test_concurrent_acquires_hand_out_one_lease(self, leases: LeaseManager) -> None:
        """W3: of many acquires racing on separate connections exactly one wins."""
        won = await asyncio.gather(
            *(leases.acquire("x:1", f"w{n}", ttl_ms=10_000) for n in range(8))
        )

        winners = [lease for lease in won if lease is not None]
        assert len(winners) == 1 and winners[0].generation >= 1
        assert await leases.current_generation("x:1") == winners[0].generation
        assert await leases.holder("x:1") == winners[0]


class TestSqliteLeaseManager(SqliteEngine, SqlLeases):
    pass


class TestPostgresLeaseManager(PostgresEngine, SqlLeases):
    pass
