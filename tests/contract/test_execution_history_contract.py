"""ExecutionRepository's history (save's ``history``, ``history``, ``append_history``), run
against every adapter family: written in the checkpoint's atomic write, numbered, bounded by
the cap with a dropped counter, removed by a delete, expiring with the state's retention."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository
from plaita.application.ports import Clock, ExecutionRepository, LeaseManager
from plaita.application.tenancy import tenant_scope
from plaita.domain import history
from plaita.domain.errors import ExecutionLeaseError, InvalidOperatorRequestError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.failures import FailureKind
from plaita.domain.history import HistoryEntry, HistoryKind
from plaita.domain.tombstone import Tombstone

from .conftest import Elapse
from .sql_fixtures import PostgresEngine, SqliteEngine, SqlStores
from .test_execution_repository_contract import NOW_MS, state

Build = Callable[..., ExecutionRepository]
TOMBSTONE = Tombstone(tenant_id="default", deleted_at_ms=NOW_MS, reason="operator request")


def timer(at_ms: int) -> HistoryEntry:
    return history.timer_fired(at_ms, node_id="a", worker="w1")


def seqs_and_times(page: history.HistoryPage) -> list[tuple[int, int]]:
    return [(entry.seq, entry.at_ms) for entry in page.entries]


class HistoryContract:
    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def build(self) -> Build:
        """A repository of the family; options: ``history_cap``, ``retention_ms``."""
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    @pytest.fixture
    def repository(self, build: Build) -> ExecutionRepository:
        return build()

    async def fence(self, leases: LeaseManager, execution_id: str = "x:1") -> int:
        lease = await leases.acquire(execution_id, "w1", ttl_ms=60_000)
        assert lease is not None
        return lease.generation

    async def test_entries_ride_the_checkpoint_numbered_from_one(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        fence = await self.fence(leases)
        first = state()
        failed = history.node_failed(
            NOW_MS + 1,
            node_id="a",
            attempt=1,
            worker="w1",
            error_class="TimeoutError",
            message="slow",
            traceback="Traceback ...\nTimeoutError: slow",
            failure=FailureKind.TRANSIENT,
            duration_ms=3,
        )
        await repository.save(
            first,
            fence=fence,
            history=[history.started(NOW_MS, input_size=11, via="start", worker="w1"), failed],
        )
        second = first.transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 2, steps=1)
        await repository.save(second, fence=fence, previous=first, history=[timer(NOW_MS + 2)])

        page = await repository.history("x:1")
        assert [entry.seq for entry in page.entries] == [1, 2, 3]
        assert [entry.kind for entry in page.entries] == [
            HistoryKind.STARTED,
            HistoryKind.NODE_FAILED,
            HistoryKind.TIMER_FIRED,
        ]
        assert page.entries[1] == HistoryEntry(
            failed.kind, failed.at_ms, "a", 1, "w1", failed.detail, 2
        )
        assert (page.next_cursor, page.dropped) == (None, 0)

    async def test_a_save_without_entries_leaves_the_history_as_it_was(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        fence = await self.fence(leases)
        first = state()
        await repository.save(first, fence=fence, history=[timer(1)])
        second = first.transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 2, steps=1)
        await repository.save(second, fence=fence, previous=first)

        assert seqs_and_times(await repository.history("x:1")) == [(1, 1)]

    async def test_pages_follow_the_cursor(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        fence = await self.fence(leases)
        await repository.save(state(), fence=fence, history=[timer(t) for t in range(5)])

        first = await repository.history("x:1", limit=2)
        assert seqs_and_times(first) == [(1, 0), (2, 1)]
        assert first.next_cursor == 2
        second = await repository.history("x:1", after=first.next_cursor, limit=2)
        assert seqs_and_times(second) == [(3, 2), (4, 3)]
        last = await repository.history("x:1", after=second.next_cursor, limit=2)
        assert seqs_and_times(last) == [(5, 4)]
        assert last.next_cursor is None
        assert (await repository.history("x:1", after=5)).entries == ()

    async def test_the_cap_drops_the_oldest_and_counts_them(
        self, leases: LeaseManager, build: Build
    ) -> None:
        repository = build(history_cap=3)
        fence = await self.fence(leases)
        first = state()
        await repository.save(first, fence=fence, history=[timer(t) for t in range(2)])
        second = first.transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 2, steps=1)
        await repository.save(
            second, fence=fence, previous=first, history=[timer(t) for t in range(2, 5)]
        )

        page = await repository.history("x:1")
        assert seqs_and_times(page) == [(3, 2), (4, 3), (5, 4)]
        assert page.dropped == 2
        # A cursor into what was dropped starts at the oldest entry kept.
        assert seqs_and_times(await repository.history("x:1", after=1, limit=1)) == [(3, 2)]

    async def test_a_refused_save_writes_no_history(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        fence = await self.fence(leases)
        await repository.save(state(), fence=fence, history=[timer(1)])

        with pytest.raises(ExecutionLeaseError):
            await repository.save(state(), fence=fence + 1, history=[timer(2)])

        assert seqs_and_times(await repository.history("x:1")) == [(1, 1)]

    async def test_a_full_save_keeps_the_history(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        fence = await self.fence(leases)
        await repository.save(state(), fence=fence, history=[timer(1)])
        again = state().transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 9, steps=4)
        await repository.save(again, fence=fence, history=[timer(2)])  # no previous: full

        assert seqs_and_times(await repository.history("x:1")) == [(1, 1), (2, 2)]

    async def test_a_delete_removes_the_history(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        fence = await self.fence(leases)
        await repository.save(state(), fence=fence, history=[timer(1)])

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=60_000)

        page = await repository.history("x:1")
        assert (page.entries, page.dropped, page.next_cursor) == ((), 0, None)
        await repository.append_history("x:1", [timer(2)])
        assert (await repository.history("x:1")).entries == ()

    async def test_append_without_a_fence_lands_only_on_a_stored_execution(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lost = history.lease_lost(5, fenced=True, node_id="a", worker="w1", generation=1)
        await repository.append_history("x:1", [lost])
        assert (await repository.history("x:1")).entries == ()

        fence = await self.fence(leases)
        await repository.save(state(), fence=fence, history=[timer(1)])
        await repository.append_history("x:1", [lost])

        page = await repository.history("x:1")
        assert [(entry.seq, entry.kind) for entry in page.entries] == [
            (1, HistoryKind.TIMER_FIRED),
            (2, HistoryKind.FENCED),
        ]

    async def test_the_history_expires_with_a_terminal_state(
        self, leases: LeaseManager, build: Build, elapse: Elapse
    ) -> None:
        repository = build(retention_ms=60_000)
        fence = await self.fence(leases)
        first = state()
        await repository.save(first, fence=fence, history=[timer(1)])
        done = first.transition(ExecutionStatus.COMPLETED, now_ms=NOW_MS + 1, result=1)
        await repository.save(done, fence=fence, previous=first, history=[timer(2)])

        await elapse(30_000)
        assert len((await repository.history("x:1")).entries) == 2
        await elapse(30_000)
        assert (await repository.history("x:1")).entries == ()

    async def test_histories_are_per_tenant(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        with tenant_scope("acme"):
            fence = await self.fence(leases)
            acme = state()
            await repository.save(
                ExecutionState.new(
                    execution_id="x:1",
                    flow_id=acme.flow_id,
                    flow_version="1",
                    fingerprint=acme.fingerprint,
                    start_node_id="a",
                    input={},
                    now_ms=NOW_MS,
                    tenant_id="acme",
                ),
                fence=fence,
                history=[timer(1)],
            )
            assert len((await repository.history("x:1")).entries) == 1
        assert (await repository.history("x:1")).entries == ()

    @pytest.mark.parametrize(("after", "limit"), [(None, 0), (None, 501), (-1, 10)])
    async def test_a_bad_page_request_is_a_named_error(
        self, repository: ExecutionRepository, after: int | None, limit: int
    ) -> None:
        with pytest.raises(InvalidOperatorRequestError):
            await repository.history("x:1", after=after, limit=limit)


class TestMemoryHistory(HistoryContract):
    @pytest.fixture
    def leases(self, clock: Clock) -> MemoryLeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def build(self, leases: MemoryLeaseManager) -> Build:
        return lambda **options: MemoryExecutionRepository(leases, **options)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class RedisFamily(HistoryContract):
    @pytest.fixture
    def redis_client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def leases(self, redis_client: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(redis_client, keys)

    @pytest.fixture
    def build(self, redis_client: redis.Redis, keys: RedisKeys) -> Build:
        return lambda **options: RedisExecutionRepository(redis_client, keys, **options)

    @pytest.fixture
    def elapse(self, redis_client: redis.Redis, keys: RedisKeys) -> Elapse:
        """Shorten every key's TTL by ``ms``, deleting the ones it reaches (deterministic)."""

        async def elapse(ms: int) -> None:
            async for key in redis_client.scan_iter(match=f"{keys.namespace}:*"):
                left = int(await redis_client.pttl(key))
                if 0 < left <= ms:
                    await redis_client.delete(key)
                elif left > ms:
                    await redis_client.pexpire(key, left - ms)

        return elapse

    async def test_the_history_shares_the_execution_hash_tag(self, keys: RedisKeys) -> None:
        with tenant_scope("default"):
            for key in (keys.execution_history("x:1"), keys.execution_history_total("x:1")):
                assert "{x:1}" in key


class TestFakeRedisHistory(RedisFamily):
    @pytest.fixture
    def redis_client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisHistory(RedisFamily):
    @pytest.fixture
    def redis_client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


class SqlFamily(SqlStores, HistoryContract):
    @pytest.fixture
    def build(self, engine: AsyncEngine, clock: Clock) -> Build:
        return lambda **options: SqlExecutionRepository(engine, clock=clock, **options)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestSqliteHistory(SqliteEngine, SqlFamily):
    pass


class TestPostgresHistory(PostgresEngine, SqlFamily):
    pass
