"""Tenant routing of execution data (W24), on every adapter family.

One execution id in two tenants is two executions: separate state, fence generations,
leases, counters and tombstones; listing shows only the scope's tenant; and nothing may be
read or written outside a tenant scope.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import pytest
import redis.asyncio as redis
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.counters import RedisCounterStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.sqlalchemy import schema as sql_schema
from plaita.application.ports import Clock, CounterStore, ExecutionRepository, LeaseManager
from plaita.application.tenancy import current_tenant, no_tenant_scope, tenant_scope
from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.errors import (
    ExecutionLeaseError,
    InvalidTenantIdError,
    TenantContextMissingError,
    TenantMismatchError,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.lease import Lease
from plaita.domain.tombstone import Tombstone

from .sql_fixtures import PostgresEngine, SqliteEngine, SqlStores

NOW_MS = 1_760_000_000_000
TTL_MS = 60_000


def _state(execution_id: str = "x:1", *, flow_id: str = "orders") -> ExecutionState:
    """A new execution of the tenant whose scope is open."""
    return ExecutionState.new(
        tenant_id=current_tenant(),
        execution_id=execution_id,
        flow_id=flow_id,
        flow_version="1",
        fingerprint="f" * 64,
        start_node_id="a",
        input={"order": 7},
        now_ms=NOW_MS,
    )


DEFAULT_STATE = ExecutionState.new(
    execution_id="x:1",
    flow_id="orders",
    flow_version="1",
    fingerprint="f" * 64,
    start_node_id="a",
    input={},
    now_ms=NOW_MS,
)


async def _save_as(
    repository: ExecutionRepository, leases: LeaseManager, state: ExecutionState, holder: str
) -> int:
    lease = await leases.acquire(state.execution_id, holder, ttl_ms=TTL_MS)
    assert lease is not None
    await repository.save(state, fence=lease.generation)
    assert await leases.release(lease)
    return lease.generation


class TenancyContract:
    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def repository(self, leases: LeaseManager) -> ExecutionRepository:
        raise NotImplementedError

    @pytest.fixture
    def counters(self) -> CounterStore:
        raise NotImplementedError

    async def test_one_id_in_two_tenants_is_two_executions(
        self, repository: ExecutionRepository, leases: LeaseManager
    ) -> None:
        with tenant_scope("acme"):
            await _save_as(repository, leases, _state(flow_id="acme-flow"), "w1")
        with tenant_scope("globex"):
            assert await repository.load("x:1") is None
            await _save_as(repository, leases, _state(flow_id="globex-flow"), "w1")

        with tenant_scope("acme"):
            acme = await repository.load("x:1")
        with tenant_scope("globex"):
            globex = await repository.load("x:1")
        assert acme is not None and acme.flow_id == "acme-flow"
        assert globex is not None and globex.flow_id == "globex-flow"
        assert await repository.load("x:1") is None  # the default tenant has neither

    async def test_fences_and_leases_are_per_tenant(
        self, repository: ExecutionRepository, leases: LeaseManager
    ) -> None:
        with tenant_scope("acme"):
            held = await leases.acquire("x:1", "w1", ttl_ms=TTL_MS)
            assert held is not None
        with tenant_scope("globex"):
            # acme's live lease does not block globex's execution of the same id ...
            other = await leases.acquire("x:1", "w2", ttl_ms=TTL_MS)
            assert other is not None
            # ... and only globex's own generation writes globex's state. (Generations have
            # the store's clock as a floor, so two tenants' may coincide within a millisecond:
            # the refused fence is one globex never handed out, not acme's plus a guess.)
            with pytest.raises(ExecutionLeaseError):
                await repository.save(_state(), fence=other.generation + 1)
        with tenant_scope("acme"):
            assert await leases.holder("x:1") == held
            assert await leases.current_generation("x:1") == held.generation

    async def test_listing_shows_only_the_scopes_tenant(
        self, repository: ExecutionRepository, leases: LeaseManager
    ) -> None:
        with tenant_scope("acme"):
            await _save_as(repository, leases, _state("x:a"), "w1")
        await _save_as(repository, leases, _state("x:d"), "w1")

        with tenant_scope("acme"):
            assert [s.execution_id for s in await repository.list()] == ["x:a"]
        listed = await repository.list(status=ExecutionStatus.RUNNING)
        assert [s.execution_id for s in listed] == ["x:d"]

    async def test_delete_and_tombstone_stay_in_their_tenant(
        self, repository: ExecutionRepository, leases: LeaseManager
    ) -> None:
        with tenant_scope("acme"):
            await _save_as(repository, leases, _state(), "w1")
        await _save_as(repository, leases, _state(), "w1")

        with tenant_scope("acme"):
            await repository.delete(
                "x:1",
                fence=None,
                tombstone=Tombstone("acme", NOW_MS, "test"),
                tombstone_ttl_ms=TTL_MS,
            )
            assert await repository.load("x:1") is None
            assert await repository.tombstone("x:1") is not None
        assert await repository.load("x:1") is not None
        assert await repository.tombstone("x:1") is None

    async def test_a_state_is_never_written_into_another_tenants_namespace(
        self, repository: ExecutionRepository, leases: LeaseManager
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=TTL_MS)
        assert lease is not None
        acme_state = attrs.evolve(DEFAULT_STATE, tenant_id="acme")

        with pytest.raises(TenantMismatchError, match=r"'acme'.*'default'"):
            await repository.save(acme_state, fence=lease.generation)

        assert await repository.load("x:1") is None
        with tenant_scope("acme"):
            assert await repository.load("x:1") is None

    async def test_counters_are_per_tenant(self, counters: CounterStore) -> None:
        bump = (CounterChange(Counter.TOTAL_RETRIES, CounterOp.INCREMENT),)
        with tenant_scope("acme"):
            await counters.apply("x:1", bump, ttl_ms=TTL_MS)
            await counters.apply("x:1", bump, ttl_ms=TTL_MS)
        with tenant_scope("globex"):
            await counters.apply("x:1", bump, ttl_ms=TTL_MS)

        with tenant_scope("acme"):
            assert (await counters.read("x:1")).total_retries == 2
        with tenant_scope("globex"):
            assert (await counters.read("x:1")).total_retries == 1
        assert (await counters.read("x:1")).total_retries == 0

    @pytest.mark.parametrize(
        "touch",
        [
            pytest.param(lambda r, leases, c: r.load("x:1"), id="load"),
            pytest.param(lambda r, leases, c: r.save(DEFAULT_STATE, fence=1), id="save"),
            pytest.param(lambda r, leases, c: r.list(), id="list"),
            pytest.param(lambda r, leases, c: r.tombstone("x:1"), id="tombstone"),
            pytest.param(
                lambda r, leases, c: r.heartbeat("x:1", fence=1, node_id="a", now_ms=NOW_MS),
                id="heartbeat",
            ),
            pytest.param(
                lambda r, leases, c: leases.acquire("x:1", "w1", ttl_ms=TTL_MS), id="acquire"
            ),
            pytest.param(lambda r, leases, c: leases.current_generation("x:1"), id="generation"),
            pytest.param(lambda r, leases, c: c.read("x:1"), id="counters"),
        ],
    )
    async def test_nothing_is_touched_outside_a_tenant_scope(
        self,
        repository: ExecutionRepository,
        leases: LeaseManager,
        counters: CounterStore,
        touch: Callable[[ExecutionRepository, LeaseManager, CounterStore], Awaitable[object]],
    ) -> None:
        """W24: a path that lost its tenant fails closed instead of using the default's."""
        await _save_as(repository, leases, _state(), "w1")

        with no_tenant_scope(), pytest.raises(TenantContextMissingError, match="tenant scope"):
            await touch(repository, leases, counters)

        stored = await repository.load("x:1")
        assert stored is not None and attrs.evolve(stored) == stored  # untouched


def test_a_scope_names_a_valid_tenant() -> None:
    with pytest.raises(InvalidTenantIdError, match="'a:b'"), tenant_scope("a:b"):
        pass


class TestMemoryTenancy(TenancyContract):
    @pytest.fixture
    def leases(self, clock: Clock) -> MemoryLeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def repository(self, leases: MemoryLeaseManager) -> ExecutionRepository:
        return MemoryExecutionRepository(leases)

    @pytest.fixture
    def counters(self, clock: Clock) -> CounterStore:
        return MemoryCounterStore(clock)


class RedisTenancyKeys:
    """On Redis the tenant is a namespace segment, never a hash tag (W24, ADR 0005)."""

    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    async def test_a_tenants_keys_live_in_its_namespace(
        self,
        client: redis.Redis,
        repository: ExecutionRepository,
        leases: LeaseManager,
        keys: RedisKeys,
    ) -> None:
        with tenant_scope("acme"):
            await _save_as(repository, leases, _state(), "w1")
        await _save_as(repository, leases, _state(), "w1")

        acme = sorted([_text(k) async for k in client.scan_iter(match=f"{keys.namespace}:acme:*")])
        assert acme == [
            f"{keys.namespace}:acme:executions",
            f"{keys.namespace}:acme:x:{{x:1}}:fencegen",
            f"{keys.namespace}:acme:x:{{x:1}}:state",
        ]
        default = sorted([_text(k) async for k in client.scan_iter(match=f"{keys.namespace}:x:*")])
        assert default == [
            f"{keys.namespace}:x:{{x:1}}:fencegen",
            f"{keys.namespace}:x:{{x:1}}:state",
        ]

    def test_dedup_claims_use_the_named_tenants_namespace(self, keys: RedisKeys) -> None:
        assert keys.dedup("acme", "order-7") == f"{keys.namespace}:acme:dedup:{{acme}}:order-7"
        assert keys.dedup("default", "k") == f"{keys.namespace}:dedup:{{default}}:k"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class TestFakeRedisTenancy(RedisTenancyKeys, TenancyContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis

    @pytest.fixture
    def leases(self, fake_redis: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(fake_redis, keys)

    @pytest.fixture
    def repository(self, fake_redis: redis.Redis, keys: RedisKeys) -> ExecutionRepository:
        return RedisExecutionRepository(fake_redis, keys)

    @pytest.fixture
    def counters(self, fake_redis: redis.Redis, keys: RedisKeys) -> CounterStore:
        return RedisCounterStore(fake_redis, keys)


class TestRedisTenancy(RedisTenancyKeys, TenancyContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis

    @pytest.fixture
    def leases(self, real_redis: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(real_redis, keys)

    @pytest.fixture
    def repository(self, real_redis: redis.Redis, keys: RedisKeys) -> ExecutionRepository:
        return RedisExecutionRepository(real_redis, keys)

    @pytest.fixture
    def counters(self, real_redis: redis.Redis, keys: RedisKeys) -> CounterStore:
        return RedisCounterStore(real_redis, keys)


class SqlTenancy(SqlStores, TenancyContract):
    """On SQL the tenant is part of every execution-data primary key (W24)."""

    @pytest.fixture
    def counters(self, clock: Clock) -> CounterStore:
        # The SQL storage keeps no counters: `plaita dev --db` pairs it with the memory
        # counter store, the combination this runs.
        return MemoryCounterStore(clock)

    async def test_a_tenants_rows_carry_its_id(
        self, engine: AsyncEngine, repository: ExecutionRepository, leases: LeaseManager
    ) -> None:
        with tenant_scope("acme"):
            await _save_as(repository, leases, _state(), "w1")
            await repository.delete(
                "x:1",
                fence=None,
                tombstone=Tombstone("acme", NOW_MS, "test"),
                tombstone_ttl_ms=TTL_MS,
            )
        await _save_as(repository, leases, _state(), "w1")

        async with engine.connect() as connection:
            keys = {
                table.name: sorted(
                    (row.tenant_id, row.execution_id)
                    for row in await connection.execute(sa.select(table))
                )
                for table in (sql_schema.executions, sql_schema.leases, sql_schema.tombstones)
            }
        assert keys == {
            "executions": [("default", "x:1")],
            "leases": [("acme", "x:1"), ("default", "x:1")],
            "tombstones": [("acme", "x:1")],
        }

    @pytest.mark.parametrize(
        "touch",
        [
            pytest.param(lambda r, leases: r.page(), id="page"),
            pytest.param(lambda r, leases: r.last_heartbeat("x:1"), id="last_heartbeat"),
            pytest.param(
                lambda r, leases: r.delete(
                    "x:1",
                    fence=None,
                    tombstone=Tombstone("default", NOW_MS, "t"),
                    tombstone_ttl_ms=1,
                ),
                id="delete",
            ),
            pytest.param(lambda r, leases: leases.holder("x:1"), id="holder"),
            pytest.param(
                lambda r, leases: leases.renew(Lease("x:1", "w1", 1), ttl_ms=TTL_MS), id="renew"
            ),
            pytest.param(lambda r, leases: leases.release(Lease("x:1", "w1", 1)), id="release"),
        ],
    )
    async def test_the_other_operations_fail_closed_outside_a_tenant_scope_too(
        self,
        repository: ExecutionRepository,
        leases: LeaseManager,
        touch: Callable[[ExecutionRepository, LeaseManager], Awaitable[object]],
    ) -> None:
        await _save_as(repository, leases, _state(), "w1")

        with no_tenant_scope(), pytest.raises(TenantContextMissingError, match="tenant scope"):
            await touch(repository, leases)

        assert await repository.load("x:1") is not None
        assert await repository.tombstone("x:1") is None


class TestSqliteTenancy(SqliteEngine, SqlTenancy):
    pass


class TestPostgresTenancy(PostgresEngine, SqlTenancy):
    pass
