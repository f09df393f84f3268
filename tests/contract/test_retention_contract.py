"""Retention contract (S5, W13): terminal executions expire, live ones never do, a delete
leaves nothing but the tombstone and the generation counter.

Run against memory (fake clock), fakeredis (bytes and str), real Redis, SQLite and
PostgreSQL. The repository of each family is wired to the operator controls (and, where it
owns them, the counters) of its backend, as the container wires them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import pytest
import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.controls import RedisExecutionControls
from plaita.adapters.redis.counters import RedisCounterStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.sqlalchemy.lease import SqlLeaseManager
from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository
from plaita.application.ports import (
    Clock,
    Counters,
    CounterStore,
    ExecutionControls,
    ExecutionRepository,
    LeaseManager,
)
from plaita.application.tenancy import tenant_scope
from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.tombstone import Tombstone

from .sql_fixtures import PostgresEngine, SqliteEngine

NOW_MS = 1_760_000_000_000
DAY_MS = 24 * 60 * 60 * 1000
#: Short enough for the Redis families, which wait in real time.
RETENTION_MS = 400
TOMBSTONE = Tombstone(tenant_id="default", deleted_at_ms=NOW_MS, reason="operator request")
Elapse = Callable[[int], Awaitable[None]]
Build = Callable[[int], ExecutionRepository]
#: Save a state over ``previous`` (None: a full write) under a fresh lease.
Save = Callable[[ExecutionState, ExecutionState | None], Awaitable[None]]


def running(execution_id: str = "x:1") -> ExecutionState:
    started = ExecutionState.new(
        execution_id=execution_id,
        flow_id="orders",
        flow_version="1",
        fingerprint="f" * 64,
        start_node_id="a",
        input={"order": 7},
        now_ms=NOW_MS,
    )
    return started.transition(
        ExecutionStatus.RUNNING,
        now_ms=NOW_MS + 1,
        node_results={"a": 1},
        variables={"v": 1},
        last_node_id="a",
        next_node_id="b",
        steps=1,
    )


def ended(previous: ExecutionState, status: ExecutionStatus) -> ExecutionState:
    error = ExecutionError(code=500, message="boom", node_id="b")
    return previous.transition(
        status,
        now_ms=previous.updated_at_ms + 1,
        node_results={**previous.node_results, "b": 2},
        error=error if status is ExecutionStatus.ERROR else None,
        steps=previous.steps + 1,
    )


def woken(previous: ExecutionState) -> ExecutionState:
    return previous.transition(
        ExecutionStatus.RUNNING, now_ms=previous.updated_at_ms + 1, error=None
    )


def parked_carrier(execution_id: str = "x:1") -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=execution_id,
        flow_id="orders",
        resume_type=ResumeType.CONTINUE,
        now_ms=NOW_MS,
        generations=LEGACY_GENERATIONS,
    )


RETRY = (CounterChange(Counter.NODE_RETRIES, CounterOp.INCREMENT, "b"),)


class RetentionContract:
    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def controls(self) -> ExecutionControls:
        raise NotImplementedError

    @pytest.fixture
    def build(self) -> Build:
        """A repository with this retention (ms), wired to ``controls``."""
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    @pytest.fixture
    def repository(self, build: Build) -> ExecutionRepository:
        return build(RETENTION_MS)

    @pytest.fixture
    def save(self, leases: LeaseManager, repository: ExecutionRepository) -> Save:
        async def save(state: ExecutionState, previous: ExecutionState | None) -> None:
            lease = await leases.acquire(state.execution_id, "w1", ttl_ms=60_000)
            assert lease is not None
            await repository.save(state, fence=lease.generation, previous=previous)
            await leases.release(lease)

        return save

    @pytest.mark.parametrize(
        "status", [ExecutionStatus.COMPLETED, ExecutionStatus.ERROR, ExecutionStatus.CANCELLED]
    )
    async def test_a_terminal_execution_is_kept_for_the_retention_then_gone(
        self,
        repository: ExecutionRepository,
        save: Save,
        elapse: Elapse,
        status: ExecutionStatus,
    ) -> None:
        """S5: state, node results and variables expire with the retention; no tombstone."""
        live = running()
        await save(live, None)
        done = ended(live, status)
        await save(done, live)

        await elapse(RETENTION_MS // 4)
        assert await repository.load("x:1") == done

        await elapse(RETENTION_MS)
        assert await repository.load("x:1") is None
        assert list(await repository.list()) == []
        assert (await repository.page()).items == ()
        assert await repository.tombstone("x:1") is None

    async def test_a_live_execution_is_never_expired(
        self,
        repository: ExecutionRepository,
        save: Save,
        elapse: Elapse,
    ) -> None:
        """S5: only terminal executions expire; a suspended approval may wait for months."""
        live = running()
        await save(live, None)
        waiting = live.transition(ExecutionStatus.SUSPENDED, now_ms=NOW_MS + 2)
        await save(waiting, live)

        await elapse(RETENTION_MS + RETENTION_MS // 2)

        assert await repository.load("x:1") == waiting

    @pytest.mark.parametrize("incremental", [True, False], ids=["delta", "full"])
    async def test_a_woken_up_execution_loses_its_expiry(
        self,
        repository: ExecutionRepository,
        save: Save,
        elapse: Elapse,
        incremental: bool,
    ) -> None:
        """W7 wake-up / W23 retry: an error made live again must not expire under it."""
        live = running()
        await save(live, None)
        failed = ended(live, ExecutionStatus.ERROR)
        await save(failed, live)
        await elapse(RETENTION_MS // 2)

        again = woken(failed)
        await save(again, failed if incremental else None)
        await elapse(RETENTION_MS + RETENTION_MS // 2)

        assert await repository.load("x:1") == again

    @pytest.mark.parametrize("incremental", [True, False], ids=["delta", "full"])
    async def test_a_later_terminal_checkpoint_keeps_it_for_the_retention_after_that(
        self, repository: ExecutionRepository, save: Save, elapse: Elapse, incremental: bool
    ) -> None:
        """A wake-up that fails again is kept a whole retention after its second end."""
        live = running()
        await save(live, None)
        failed = ended(live, ExecutionStatus.ERROR)
        await save(failed, live)
        await elapse(RETENTION_MS // 2)

        again = attrs.evolve(failed, steps=failed.steps + 1, updated_at_ms=NOW_MS + 99)
        await save(again, failed if incremental else None)
        await elapse(RETENTION_MS // 2 + RETENTION_MS // 4)
        assert await repository.load("x:1") == again

        await elapse(RETENTION_MS // 2)
        assert await repository.load("x:1") is None

    async def test_operator_flags_and_parked_carriers_expire_with_the_terminal_execution(
        self,
        repository: ExecutionRepository,
        controls: ExecutionControls,
        save: Save,
        elapse: Elapse,
    ) -> None:
        """A cancelled execution keeps its cancel flag; it must not outlive the state."""
        live = running()
        await save(live, None)
        await controls.set_flags("x:1", paused=True, cancel_requested=True)
        await controls.set_flags("x:1", cancel_requested=False)
        assert (await controls.admit(parked_carrier(), parkable=True)).parked
        await controls.set_flags("x:1", cancel_requested=True)
        await save(ended(live, ExecutionStatus.CANCELLED), live)

        await elapse(RETENTION_MS // 4)
        assert await controls.get("x:1") == ControlFlags(
            paused=True, cancel_requested=True, parked=1
        )
        await elapse(RETENTION_MS)

        assert await controls.get("x:1") == ControlFlags()
        assert await controls.parked("x:1") == []

    async def test_a_live_executions_flags_are_kept(
        self,
        controls: ExecutionControls,
        save: Save,
        elapse: Elapse,
    ) -> None:
        live = running()
        await save(live, None)
        failed = ended(live, ExecutionStatus.ERROR)
        await save(failed, live)
        await controls.set_flags("x:1", paused=True)
        await save(woken(failed), failed)

        await elapse(RETENTION_MS + RETENTION_MS // 2)

        assert await controls.get("x:1") == ControlFlags(paused=True)

    async def test_delete_removes_the_flags_and_parked_carriers_with_the_state(
        self,
        repository: ExecutionRepository,
        controls: ExecutionControls,
        save: Save,
    ) -> None:
        """W13: a delete leaves no control or parked record behind, in the same step."""
        await save(running(), None)
        await controls.set_flags("x:1", paused=True, cancel_requested=False)
        assert (await controls.admit(parked_carrier(), parkable=True)).parked

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        assert await controls.get("x:1") == ControlFlags()
        assert await controls.parked("x:1") == []

    async def test_a_second_delete_clears_flags_set_after_the_first(
        self, repository: ExecutionRepository, controls: ExecutionControls
    ) -> None:
        """An operator flag that raced the first delete is removed by the next one."""
        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)
        await controls.set_flags("x:1", cancel_requested=True)

        stored = await repository.delete(
            "x:1",
            fence=None,
            tombstone=attrs.evolve(TOMBSTONE, reason="again"),
            tombstone_ttl_ms=DAY_MS,
        )

        assert stored == TOMBSTONE
        assert await controls.get("x:1") == ControlFlags()

    def test_a_retention_must_be_positive(self, build: Build) -> None:
        """S5: there is no 'delete at once' (see plaita.domain.retention)."""
        with pytest.raises(ValueError, match="retention must be a positive number"):
            build(0)


class OwnCounters:
    """Families whose repository owns the counters' lifetime (memory, Redis)."""

    @pytest.fixture
    def counters(self) -> CounterStore:
        raise NotImplementedError

    async def test_the_counters_expire_with_the_terminal_execution(
        self,
        counters: CounterStore,
        save: Save,
        elapse: Elapse,
    ) -> None:
        """S5: counters (7-day sliding TTL of their own) expire within the retention too."""
        live = running()
        await save(live, None)
        await counters.apply("x:1", RETRY, ttl_ms=7 * DAY_MS)
        await save(ended(live, ExecutionStatus.COMPLETED), live)

        await elapse(RETENTION_MS + RETENTION_MS // 2)

        assert await counters.read("x:1") == Counters()

    async def test_a_live_executions_counters_keep_their_own_ttl(
        self,
        counters: CounterStore,
        save: Save,
        elapse: Elapse,
    ) -> None:
        await save(running(), None)
        await counters.apply("x:1", RETRY, ttl_ms=7 * DAY_MS)

        await elapse(RETENTION_MS + RETENTION_MS // 2)

        assert await counters.read("x:1") == Counters(node_retries={"b": 1})


class TestMemoryRetention(OwnCounters, RetentionContract):
    @pytest.fixture
    def leases(self, clock: Clock) -> MemoryLeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def counters(self, clock: Clock) -> MemoryCounterStore:
        return MemoryCounterStore(clock)

    @pytest.fixture
    def controls(self, clock: Clock) -> MemoryExecutionControls:
        return MemoryExecutionControls(clock)

    @pytest.fixture
    def build(
        self,
        leases: MemoryLeaseManager,
        counters: MemoryCounterStore,
        controls: MemoryExecutionControls,
    ) -> Build:
        return lambda retention_ms: MemoryExecutionRepository(
            leases, counters, controls=controls, retention_ms=retention_ms
        )

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock

    async def test_prune_indexes_drops_what_expired(
        self,
        repository: ExecutionRepository,
        save: Save,
        elapse: Elapse,
    ) -> None:
        for n in range(3):
            live = running(f"x:{n}")
            await save(live, None)
            if n:
                await save(ended(live, ExecutionStatus.COMPLETED), live)
        await elapse(RETENTION_MS + 1)

        pruner = repository  # the memory twin is its own index
        assert await pruner.prune_indexes(budget=1) == 1  # type: ignore[attr-defined]
        assert await pruner.prune_indexes(budget=10) == 1  # type: ignore[attr-defined]
        assert await pruner.prune_indexes(budget=10) == 0  # type: ignore[attr-defined]
        assert [s.execution_id for s in await repository.list()] == ["x:0"]


class RedisRetention(OwnCounters, RetentionContract):
    """The Redis families: key TTLs read with PTTL, what is left found with SCAN."""

    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def leases(self, client: redis.Redis, keys: RedisKeys) -> RedisLeaseManager:
        return RedisLeaseManager(client, keys)

    @pytest.fixture
    def counters(self, client: redis.Redis, keys: RedisKeys) -> RedisCounterStore:
        return RedisCounterStore(client, keys)

    @pytest.fixture
    def controls(self, client: redis.Redis, keys: RedisKeys) -> RedisExecutionControls:
        return RedisExecutionControls(client, keys)

    @pytest.fixture
    def build(self, client: redis.Redis, keys: RedisKeys) -> Build:
        return lambda retention_ms: RedisExecutionRepository(
            client, keys, retention_ms=retention_ms
        )

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def _everything(
        self,
        execution_id: str,
        save: Save,
        repository: ExecutionRepository,
        leases: LeaseManager,
        counters: CounterStore,
        controls: ExecutionControls,
    ) -> ExecutionState:
        """A live execution with every record it can have: state, nodes, vars, counters,
        heartbeat, flags and a parked carrier."""
        live = running(execution_id)
        await save(live, None)
        await counters.apply(execution_id, RETRY, ttl_ms=7 * DAY_MS)
        lease = await leases.acquire(execution_id, "w1", ttl_ms=60_000)
        assert lease is not None
        await repository.heartbeat(execution_id, fence=lease.generation, node_id="b", now_ms=1)
        await leases.release(lease)
        await controls.set_flags(execution_id, paused=True)
        assert (await controls.admit(parked_carrier(execution_id), parkable=True)).parked
        return live

    async def _ttls(self, client: redis.Redis, keys: RedisKeys) -> dict[str, int]:
        found = [_text(k) async for k in client.scan_iter(match=f"{keys.namespace}:x:*")]
        return {key.rsplit(":", 1)[1]: int(await client.pttl(key)) for key in found}

    async def test_every_key_of_a_terminal_execution_expires_within_the_retention(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        save: Save,
        leases: LeaseManager,
        counters: CounterStore,
        controls: ExecutionControls,
    ) -> None:
        """S5 with W4: every key gets a TTL <= the retention in the terminal checkpoint's own
        script (a shorter one of its own stays); the generation counter never gets one."""
        repository = RedisExecutionRepository(client, keys, retention_ms=DAY_MS)
        live = await self._everything("x:1", save, repository, leases, counters, controls)
        lease = await leases.acquire("x:1", "w1", ttl_ms=60_000)
        assert lease is not None

        await repository.save(
            ended(live, ExecutionStatus.CANCELLED), fence=lease.generation, previous=live
        )

        ttls = await self._ttls(client, keys)
        assert ttls.pop("fencegen") == -1
        lease_ttl = ttls.pop("lease")
        assert 0 < lease_ttl <= 60_000  # the holder's own, released right after
        assert set(ttls) == {"state", "nodes", "vars", "counters", "heartbeat", "control", "parked"}
        assert all(0 < ttl <= DAY_MS for ttl in ttls.values()), ttls
        assert ttls["heartbeat"] <= 360_000  # a shorter TTL of its own is kept

    async def test_a_live_checkpoint_over_a_terminal_one_removes_the_ttls(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        save: Save,
        leases: LeaseManager,
        counters: CounterStore,
        controls: ExecutionControls,
    ) -> None:
        """W7 wake-up after the TTLs were set: PERSIST in the same script."""
        repository = RedisExecutionRepository(client, keys, retention_ms=DAY_MS)
        live = await self._everything("x:1", save, repository, leases, counters, controls)
        failed = ended(live, ExecutionStatus.ERROR)
        await save(failed, live)

        await save(woken(failed), failed)

        ttls = await self._ttls(client, keys)
        assert {name: ttls[name] for name in ("state", "nodes", "vars", "control", "parked")} == {
            "state": -1,
            "nodes": -1,
            "vars": -1,
            "control": -1,
            "parked": -1,
        }
        assert 0 < ttls["counters"] <= DAY_MS  # sliding TTL of their own, refreshed on use
        assert ttls["fencegen"] == -1

    async def test_delete_leaves_only_the_tombstone_and_the_generation_counter(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        save: Save,
        repository: ExecutionRepository,
        leases: LeaseManager,
        counters: CounterStore,
        controls: ExecutionControls,
    ) -> None:
        """W13: SCAN the namespace after the delete script: of the execution, nothing else is
        left (the deployment's registry of executions indexes is no execution's key)."""
        await self._everything("x:1", save, repository, leases, counters, controls)

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        left = sorted([_text(k) async for k in client.scan_iter(match=f"{keys.namespace}:*")])
        assert left == sorted(
            [keys.execution_indexes(), keys.fence_generation("x:1"), keys.tombstone("x:1")]
        )
        assert int(await client.pttl(keys.fence_generation("x:1"))) == -1
        assert await client.zscore(keys.executions(), "x:1") is None

    async def test_a_listing_prunes_the_index_members_whose_state_expired(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        repository: ExecutionRepository,
        save: Save,
        elapse: Elapse,
    ) -> None:
        """S1: the executions index heals itself on load."""
        for execution_id in ("x:live", "x:old"):
            await save(running(execution_id), None)
        await save(ended(running("x:old"), ExecutionStatus.COMPLETED), running("x:old"))
        await elapse(RETENTION_MS + RETENTION_MS // 2)

        assert [s.execution_id for s in await repository.list()] == ["x:live"]
        assert await client.zscore(keys.executions(), "x:old") is None
        await save(ended(running("x:p"), ExecutionStatus.COMPLETED), None)
        await elapse(RETENTION_MS + RETENTION_MS // 2)

        assert [s.execution_id for s in (await repository.page()).items] == ["x:live"]
        assert [_text(m) for m in await client.zrange(keys.executions(), 0, -1)] == ["x:live"]

    async def test_prune_indexes_sweeps_dead_members_of_every_tenant(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        repository: ExecutionRepository,
        save: Save,
        elapse: Elapse,
    ) -> None:
        """S1 / V7: the janitor's walk reaches members no listing reads, in every tenant."""
        for tenant in ("default", "acme"):
            with tenant_scope(tenant):
                for n in range(3):
                    live = attrs.evolve(running(f"x:{n}"), tenant_id=tenant)
                    await save(live, None)
                    if n:
                        await save(ended(live, ExecutionStatus.COMPLETED), live)
        await elapse(RETENTION_MS + RETENTION_MS // 2)

        pruner = repository  # RedisExecutionRepository is an IndexJanitor too
        removed = 0
        for _ in range(10):
            removed += await pruner.prune_indexes(budget=2)  # type: ignore[attr-defined]
        assert removed == 4
        for tenant in ("default", "acme"):
            with tenant_scope(tenant):
                members = await client.zrange(keys.executions(), 0, -1)
                assert [_text(m) for m in members] == ["x:0"]


class TestFakeRedisRetention(RedisRetention):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisRetention(RedisRetention):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


class SqlRetention(RetentionContract):
    """State rows carry the retention as their expiry; the controls live on the backend."""

    @pytest.fixture
    def leases(self, engine: AsyncEngine, clock: Clock) -> SqlLeaseManager:
        return SqlLeaseManager(engine, clock)

    @pytest.fixture
    def controls(self, clock: Clock) -> MemoryExecutionControls:
        return MemoryExecutionControls(clock)

    @pytest.fixture
    def build(self, engine: AsyncEngine, clock: Clock, controls: MemoryExecutionControls) -> Build:
        return lambda retention_ms: SqlExecutionRepository(
            engine, clock=clock, controls=controls, retention_ms=retention_ms
        )

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestSqliteRetention(SqliteEngine, SqlRetention):
    pass


class TestPostgresRetention(PostgresEngine, SqlRetention):
    pass


class ControlsRetentionContract:
    """``ExecutionControls.retain``: what a repository without the flags in its own script
    (SQL storage) uses to let them expire with the execution (S5)."""

    @pytest.fixture
    def controls(self) -> ExecutionControls:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    async def _paused_with_a_parked_carrier(self, controls: ExecutionControls) -> None:
        await controls.set_flags("x:1", paused=True)
        assert (await controls.admit(parked_carrier(), parkable=True)).parked

    async def test_retained_flags_and_carriers_expire_within_the_ttl(
        self, controls: ExecutionControls, elapse: Elapse
    ) -> None:
        await self._paused_with_a_parked_carrier(controls)

        await controls.retain("x:1", ttl_ms=RETENTION_MS)
        await elapse(RETENTION_MS // 4)
        assert await controls.get("x:1") == ControlFlags(paused=True, parked=1)
        await elapse(RETENTION_MS)

        assert await controls.get("x:1") == ControlFlags()
        assert await controls.parked("x:1") == []

    async def test_a_later_retain_restarts_the_lifetime(
        self, controls: ExecutionControls, elapse: Elapse
    ) -> None:
        await self._paused_with_a_parked_carrier(controls)
        await controls.retain("x:1", ttl_ms=RETENTION_MS)
        await elapse(RETENTION_MS // 2)

        await controls.retain("x:1", ttl_ms=RETENTION_MS)
        await elapse(RETENTION_MS // 2 + RETENTION_MS // 4)
        assert await controls.get("x:1") == ControlFlags(paused=True, parked=1)

        await elapse(RETENTION_MS // 2)
        assert await controls.get("x:1") == ControlFlags()

    async def test_retain_none_keeps_them_until_cleared(
        self, controls: ExecutionControls, elapse: Elapse
    ) -> None:
        await self._paused_with_a_parked_carrier(controls)
        await controls.retain("x:1", ttl_ms=RETENTION_MS)

        await controls.retain("x:1", ttl_ms=None)
        await elapse(RETENTION_MS + RETENTION_MS // 4)

        assert await controls.get("x:1") == ControlFlags(paused=True, parked=1)

    async def test_a_carrier_parked_after_the_end_expires_with_the_flags(
        self, controls: ExecutionControls, elapse: Elapse
    ) -> None:
        """A late carrier of an execution that ended paused must not be kept forever."""
        await controls.set_flags("x:1", paused=True)
        await controls.retain("x:1", ttl_ms=RETENTION_MS)

        assert (await controls.admit(parked_carrier(), parkable=True)).parked
        await elapse(RETENTION_MS + RETENTION_MS // 4)

        assert await controls.parked("x:1") == []

    async def test_flags_set_after_a_retain_of_nothing_get_no_lifetime(
        self, controls: ExecutionControls, elapse: Elapse
    ) -> None:
        """Flags set after the end are the operator's (refused for terminal executions),
        never given a lifetime meant for records that did not exist yet."""
        await controls.retain("x:1", ttl_ms=RETENTION_MS)
        await controls.set_flags("x:1", paused=True)

        await elapse(RETENTION_MS + RETENTION_MS // 4)

        assert await controls.get("x:1") == ControlFlags(paused=True)


class TestMemoryControlsRetention(ControlsRetentionContract):
    @pytest.fixture
    def controls(self, clock: Clock) -> ExecutionControls:
        return MemoryExecutionControls(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestFakeRedisControlsRetention(ControlsRetentionContract):
    @pytest.fixture
    def controls(self, fake_redis: redis.Redis, keys: RedisKeys) -> ExecutionControls:
        return RedisExecutionControls(fake_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real


@pytest.mark.redis
class TestRedisControlsRetention(ControlsRetentionContract):
    @pytest.fixture
    def controls(self, real_redis: redis.Redis, keys: RedisKeys) -> ExecutionControls:
        return RedisExecutionControls(real_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
