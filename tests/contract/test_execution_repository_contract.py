"""ExecutionRepository contract (S1, S3, W4, W13), run against every adapter family."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import attrs
import fakeredis
import pytest
import redis.asyncio as redis
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.sqlalchemy import schema as sql_schema
from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository
from plaita.application.ports import (
    Clock,
    ExecutionRepository,
    LeaseManager,
    NodeHeartbeat,
)
from plaita.application.tenancy import tenant_scope
from plaita.domain import history
from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.execution import (
    ExecutionError,
    ExecutionState,
    ExecutionStatus,
    NodeFailure,
    Suspension,
)
from plaita.domain.history import HistoryKind
from plaita.domain.tombstone import Tombstone

from .sql_fixtures import PostgresEngine, SqliteEngine, SqlStores

NOW_MS = 1_760_000_000_000
DAY_MS = 24 * 60 * 60 * 1000
Store = Callable[[ExecutionState], Awaitable[None]]
Elapse = Callable[[int], Awaitable[None]]
Probe = Callable[[str], Awaitable[Any]]
Build = Callable[..., ExecutionRepository]
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


EXAMPLE_IDS = itertools.count()
TOMBSTONE = Tombstone(tenant_id="default", deleted_at_ms=NOW_MS + 50, reason="operator request")
HISTORY_NOTE = history.accepted(NOW_MS, input_size=2, via="cli", by="bob", dedup_key="k-1")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
few_keys = st.sampled_from(["a", "b", "c", "d", "ü", ""])
step_changes = st.fixed_dictionaries(
    {
        "node_results": st.dictionaries(few_keys, json_values, max_size=4),
        "variables": st.dictionaries(few_keys, json_values, max_size=4),
    },
    optional={
        "status": st.sampled_from(ExecutionStatus),
        "steps": st.integers(min_value=0, max_value=10**6),
        "updated_at_ms": st.integers(min_value=0, max_value=2**53),
        "result": json_values,
        "next_node_id": st.none() | few_keys,
        "last_node_id": st.none() | few_keys,
        "suspension": st.none() | st.builds(Suspension, node_id=few_keys),
        "error": st.none() | st.builds(ExecutionError, code=st.integers(0, 999), message=few_keys),
    },
)


def step_chain(start: ExecutionState) -> list[ExecutionState]:
    """A run's checkpoints: results added and changed in type, variables set and removed,
    a suspension set and cleared, a result removed (retry from a node), an error, the end."""
    s1 = start.transition(
        ExecutionStatus.RUNNING,
        now_ms=NOW_MS + 1,
        node_results={"a": 1},
        variables={"x": 1},
        last_node_id="a",
        next_node_id="b",
        steps=1,
    )
    s2 = s1.transition(
        ExecutionStatus.RUNNING,
        now_ms=NOW_MS + 2,
        node_results={"a": True, "b": {"n": [1, 2.5, None]}},
        variables={"x": 1.0, "y": "ü"},
        steps=2,
    )
    s3 = s2.transition(
        ExecutionStatus.SUSPENDED,
        now_ms=NOW_MS + 3,
        variables={"y": {"nested": ["z"]}},
        suspension=Suspension(node_id="wait", subscription_id="s:1"),
        next_node_id="wait",
        last_branch="then",
        steps=3,
    )
    s4 = s3.transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 4, steps=4)
    s5 = s4.transition(
        ExecutionStatus.RUNNING,
        now_ms=NOW_MS + 5,
        node_results={"a": True},
        variables={},
        last_branch=None,
        steps=5,
    )
    s6 = s5.transition(
        ExecutionStatus.ERROR,
        now_ms=NOW_MS + 6,
        error=ExecutionError(code=500, message="boom", node_id="b"),
        steps=6,
    )
    s7 = s6.transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 7, error=None, steps=7)
    s8 = s7.transition(
        ExecutionStatus.COMPLETED,
        now_ms=NOW_MS + 8,
        node_results={"a": True, "c": "done"},
        result=[1, "two"],
        next_node_id=None,
        steps=8,
    )
    return [start, s1, s2, s3, s4, s5, s6, s7, s8]


class ExecutionRepositoryContract:
    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def repository(self, leases: LeaseManager) -> ExecutionRepository:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    @pytest.fixture
    def seed_counters(self) -> Probe:
        """Give an execution some budget counters (W7, W8) for a delete to remove."""
        raise NotImplementedError

    @pytest.fixture
    def counters_exist(self) -> Probe:
        raise NotImplementedError

    @pytest.fixture
    def tombstone_ttl(self) -> Probe:
        """Milliseconds the execution's tombstone has left (PTTL), None without one."""
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

        with pytest.raises(ExecutionLeaseError, match=r"x:1.*fence \d+.*generation is \d+"):
            await repository.save(late, fence=old.generation)

        assert await repository.load("x:1") == kept

    async def test_reindex_finds_nothing_missing_when_the_index_is_whole(
        self, repository: ExecutionRepository, store: Store
    ) -> None:
        """K4: reindex puts back only what the index lost; a whole index is left as it is."""
        await store(state("x:1"))
        await store(state("x:2", updated_at_ms=NOW_MS + 1))

        assert await repository.reindex() == 0
        assert [s.execution_id for s in await repository.list()] == ["x:2", "x:1"]

    async def test_save_with_a_fence_never_handed_out_raises(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None

        with pytest.raises(ExecutionLeaseError, match=f"fence {lease.generation + 1}"):
            await repository.save(state(), fence=lease.generation + 1)
        assert await repository.load("x:1") is None

    async def test_save_without_any_lease_raises_and_writes_nothing(
        self, repository: ExecutionRepository
    ) -> None:
        with pytest.raises(ExecutionLeaseError, match="generation is None"):
            await repository.save(state(), fence=1)

        assert await repository.load("x:1") is None
        assert list(await repository.list()) == []

    # --- accept: the pending state of a start (ADR 0022) --------------------------------

    async def test_accept_stores_a_pending_state_with_its_history_and_lists_it(
        self, repository: ExecutionRepository
    ) -> None:
        pending = state(status=ExecutionStatus.PENDING)
        accepted = history.accepted(NOW_MS, input_size=11, via="api", by="alice", dedup_key=None)

        assert await repository.accept(pending, history=[accepted]) is True

        assert await repository.load("x:1") == pending
        assert [e.kind for e in (await repository.history("x:1")).entries] == [HistoryKind.ACCEPTED]
        listed = await repository.list(status=ExecutionStatus.PENDING)
        assert [s.execution_id for s in listed] == ["x:1"]

    async def test_accept_writes_nothing_over_a_stored_state(
        self, repository: ExecutionRepository, store: Store
    ) -> None:
        """A reused id: the stored execution stays exactly as it was, history included."""
        running = state(updated_at_ms=NOW_MS + 5)
        await store(running)

        again = state(status=ExecutionStatus.PENDING, updated_at_ms=NOW_MS + 9)
        assert await repository.accept(again, history=[HISTORY_NOTE]) is False

        assert await repository.load("x:1") == running
        assert (await repository.history("x:1")).entries == ()
        assert [s.updated_at_ms for s in await repository.list()] == [NOW_MS + 5]

    async def test_accept_never_brings_a_deleted_execution_back(
        self, repository: ExecutionRepository
    ) -> None:
        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=60_000)

        accepted = await repository.accept(
            state(status=ExecutionStatus.PENDING), history=[HISTORY_NOTE]
        )

        assert accepted is False
        assert await repository.load("x:1") is None
        assert await repository.list() == []

    async def test_the_first_worker_save_over_an_accepted_state_lands(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """accept takes no generation: the first lease's fence writes over it, in full or
        incrementally."""
        pending = state(status=ExecutionStatus.PENDING)
        await repository.accept(pending, history=[HISTORY_NOTE])
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None

        running = pending.transition(ExecutionStatus.RUNNING, now_ms=NOW_MS + 1)
        await repository.save(running, fence=lease.generation, previous=pending)

        assert await repository.load("x:1") == running
        assert len((await repository.history("x:1")).entries) == 1

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
            dedup_key="order-7",
            last_failure=NodeFailure.of(
                node_id="a",
                attempt=2,
                error_class="ConnectionError",
                message="refused ü",
                transient=True,
                at_ms=NOW_MS + 4,
                retry_at_ms=NOW_MS + 9,
            ),
        )
        with tenant_scope("acme"):  # a state is stored in its own tenant's namespace (W24)
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

    # --- incremental checkpoints (S3) ------------------------------------------------

    async def test_incremental_saves_round_trip_the_state_exactly(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """S3: each save sends only the step's changes; what loads is the whole state."""
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        chain = step_chain(state())

        await repository.save(chain[0], fence=lease.generation)
        for previous, current in itertools.pairwise(chain):
            await repository.save(current, fence=lease.generation, previous=previous)
            assert await repository.load("x:1") == current

    async def test_a_step_saved_on_top_of_a_loaded_state_round_trips(
        self, leases: LeaseManager, repository: ExecutionRepository, store: Store
    ) -> None:
        await store(attrs.evolve(state(), node_results={"a": 1}, variables={"v": [1]}))
        lease = await leases.acquire("x:1", "w2", ttl_ms=10_000)
        assert lease is not None
        loaded = await repository.load("x:1")
        assert loaded is not None
        step = loaded.transition(
            ExecutionStatus.RUNNING,
            now_ms=NOW_MS + 1,
            node_results={**loaded.node_results, "b": {"ok": True}},
            variables={"w": "x"},
            steps=loaded.steps + 1,
        )

        await repository.save(step, fence=lease.generation, previous=loaded)

        assert await repository.load("x:1") == step

    async def test_a_save_without_previous_replaces_every_part(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """No previous: the whole state is written, and nothing older survives beside it."""
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        grown = attrs.evolve(state(), node_results={"a": 1, "b": 2}, variables={"x": 1, "y": 2})
        await repository.save(grown, fence=lease.generation)
        rewound = attrs.evolve(state(), node_results={"c": 3}, variables={})

        await repository.save(rewound, fence=lease.generation)

        assert await repository.load("x:1") == rewound

    async def test_a_delta_with_nothing_stored_under_it_writes_the_whole_state(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        never_saved = attrs.evolve(state(), node_results={"a": 1})
        current = attrs.evolve(never_saved, node_results={"a": 1, "b": 2}, steps=2)

        await repository.save(current, fence=lease.generation, previous=never_saved)

        assert await repository.load("x:1") == current

    async def test_an_unchanged_state_saved_with_previous_is_still_fenced(
        self, leases: LeaseManager, repository: ExecutionRepository, store: Store
    ) -> None:
        kept = state()
        await store(kept)
        lease = await leases.acquire("x:1", "w2", ttl_ms=10_000)
        assert lease is not None

        await repository.save(kept, fence=lease.generation, previous=kept)
        with pytest.raises(ExecutionLeaseError, match="fence 1"):
            await repository.save(kept, fence=1, previous=kept)

        assert await repository.load("x:1") == kept

    async def test_a_rejected_incremental_save_writes_nothing(
        self, leases: LeaseManager, repository: ExecutionRepository, store: Store
    ) -> None:
        kept = attrs.evolve(state(), node_results={"a": 1}, variables={"v": 1})
        await store(kept)
        await leases.acquire("x:1", "w2", ttl_ms=10_000)
        late = attrs.evolve(
            kept, node_results={"b": 2}, variables={}, steps=9, status=ExecutionStatus.COMPLETED
        )

        with pytest.raises(ExecutionLeaseError, match=r"x:1.*fence \d+.*generation is \d+"):
            await repository.save(late, fence=1, previous=kept)

        assert await repository.load("x:1") == kept

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(steps=st.lists(step_changes, min_size=1, max_size=6))
    async def test_any_chain_of_incremental_saves_round_trips(
        self,
        leases: LeaseManager,
        repository: ExecutionRepository,
        steps: list[dict[str, Any]],
    ) -> None:
        """Hypothesis: whatever a chain of steps adds, changes or removes, loads exactly."""
        execution_id = f"x:h{next(EXAMPLE_IDS)}"
        lease = await leases.acquire(execution_id, "w1", ttl_ms=60_000)
        assert lease is not None
        previous = state(execution_id)
        await repository.save(previous, fence=lease.generation)
        for changes in steps:
            current = attrs.evolve(previous, **changes)
            await repository.save(current, fence=lease.generation, previous=previous)
            assert await repository.load(execution_id) == current
            previous = current

    # --- delete = revoke + tombstone (W13) ---------------------------------------------

    async def test_delete_removes_every_part_and_keeps_the_generation(
        self,
        leases: LeaseManager,
        repository: ExecutionRepository,
        seed_counters: Probe,
        counters_exist: Probe,
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.save(
            attrs.evolve(state(), node_results={"a": 1}, variables={"v": 1}),
            fence=lease.generation,
        )
        await seed_counters("x:1")
        assert await counters_exist("x:1")

        stored = await repository.delete(
            "x:1", fence=lease.generation, tombstone=TOMBSTONE, tombstone_ttl_ms=30 * DAY_MS
        )

        assert stored == TOMBSTONE
        assert await repository.load("x:1") is None
        assert list(await repository.list()) == []
        assert await leases.holder("x:1") is None
        assert await leases.current_generation("x:1") == lease.generation
        assert not await counters_exist("x:1")
        assert await repository.tombstone("x:1") == TOMBSTONE

    async def test_the_deleting_holder_can_never_write_again(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """W13: the generation stays, yet a later save under it (full or delta) is refused."""
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        before = state()
        await repository.save(before, fence=lease.generation)
        await repository.delete(
            "x:1", fence=lease.generation, tombstone=TOMBSTONE, tombstone_ttl_ms=30 * DAY_MS
        )
        after = attrs.evolve(before, node_results={"a": 1}, steps=1)

        with pytest.raises(ExecutionLeaseError, match=r"x:1.*revoked"):
            await repository.save(after, fence=lease.generation, previous=before)
        with pytest.raises(ExecutionLeaseError, match=r"x:1.*revoked"):
            await repository.save(after, fence=lease.generation)

        assert await repository.load("x:1") is None
        assert list(await repository.list()) == []
        assert await repository.tombstone("x:1") == TOMBSTONE

    async def test_a_new_lease_cannot_bring_a_deleted_execution_back(
        self, leases: LeaseManager, repository: ExecutionRepository, store: Store
    ) -> None:
        await store(state())
        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)
        lease = await leases.acquire("x:1", "w2", ttl_ms=10_000)
        assert lease is not None

        with pytest.raises(ExecutionLeaseError, match="revoked"):
            await repository.save(state(), fence=lease.generation)
        assert await repository.load("x:1") is None

    async def test_a_second_delete_keeps_the_first_tombstone(
        self, leases: LeaseManager, repository: ExecutionRepository, store: Store
    ) -> None:
        await store(state())
        first = await repository.delete(
            "x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
        )
        again = Tombstone(tenant_id="default", deleted_at_ms=NOW_MS + 99, reason="again")

        second = await repository.delete(
            "x:1", fence=None, tombstone=again, tombstone_ttl_ms=DAY_MS
        )

        assert first == second == TOMBSTONE
        assert await repository.tombstone("x:1") == TOMBSTONE

    async def test_a_holder_may_delete_twice(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.save(state(), fence=lease.generation)
        later = Tombstone(tenant_id="default", deleted_at_ms=NOW_MS + 1, reason="again")

        await repository.delete(
            "x:1", fence=lease.generation, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
        )
        again = await repository.delete(
            "x:1", fence=lease.generation, tombstone=later, tombstone_ttl_ms=DAY_MS
        )

        assert again == TOMBSTONE

    async def test_the_tombstone_expires_after_its_ttl(
        self, repository: ExecutionRepository, store: Store, tombstone_ttl: Probe, elapse: Elapse
    ) -> None:
        await store(state())
        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)
        assert DAY_MS - 10_000 < await tombstone_ttl("x:1") <= DAY_MS

        await elapse(DAY_MS + 1)

        assert await repository.tombstone("x:1") is None
        assert await tombstone_ttl("x:1") is None

    async def test_a_second_delete_only_extends_the_tombstone_ttl(
        self, repository: ExecutionRepository, store: Store, tombstone_ttl: Probe, elapse: Elapse
    ) -> None:
        await store(state())
        # A minute: shorter than the day the second delete asks for, and far longer than the
        # real time between the two deletes on a loaded machine (200 ms once was not).
        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=60_000)
        later = Tombstone(tenant_id="default", deleted_at_ms=NOW_MS + 1, reason="again")
        await repository.delete("x:1", fence=None, tombstone=later, tombstone_ttl_ms=DAY_MS)
        assert DAY_MS - 10_000 < await tombstone_ttl("x:1") <= DAY_MS
        await repository.delete("x:1", fence=None, tombstone=later, tombstone_ttl_ms=100)

        await elapse(300)

        assert await repository.tombstone("x:1") == TOMBSTONE
        assert await tombstone_ttl("x:1") > DAY_MS - 10_000

    async def test_the_tombstone_ttl_is_set_as_asked(
        self, repository: ExecutionRepository, store: Store, tombstone_ttl: Probe
    ) -> None:
        await store(state())

        await repository.delete(
            "x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=30 * DAY_MS
        )

        assert 30 * DAY_MS - 10_000 < await tombstone_ttl("x:1") <= 30 * DAY_MS

    async def test_an_operator_delete_fences_off_the_current_holder(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """fence None revokes whoever holds the lease: its generation is stale at once."""
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        before = state()
        await repository.save(before, fence=lease.generation)

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        current = await leases.current_generation("x:1")
        assert current is not None and current > lease.generation
        assert await leases.holder("x:1") is None
        assert not await leases.renew(lease, ttl_ms=10_000)
        after = attrs.evolve(before, steps=1)
        stale = rf"fence {lease.generation}.*generation is {current}"
        with pytest.raises(ExecutionLeaseError, match=stale):
            await repository.save(after, fence=lease.generation, previous=before)
        with pytest.raises(ExecutionLeaseError, match=stale):
            await repository.delete(
                "x:1", fence=lease.generation, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
            )
        assert await repository.load("x:1") is None

    async def test_a_delete_with_a_stale_fence_changes_nothing(
        self,
        leases: LeaseManager,
        repository: ExecutionRepository,
        store: Store,
        seed_counters: Probe,
        counters_exist: Probe,
    ) -> None:
        kept = attrs.evolve(state(), node_results={"a": 1})
        await store(kept)
        await seed_counters("x:1")
        current = await leases.acquire("x:1", "w2", ttl_ms=10_000)

        with pytest.raises(ExecutionLeaseError, match=r"x:1.*fence \d+.*generation is \d+"):
            await repository.delete("x:1", fence=1, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        assert await repository.load("x:1") == kept
        assert [s.execution_id for s in await repository.list()] == ["x:1"]
        assert await repository.tombstone("x:1") is None
        assert current is not None and await leases.holder("x:1") == current
        assert await leases.current_generation("x:1") == current.generation
        assert await counters_exist("x:1")

    async def test_a_fenced_delete_without_any_lease_is_refused(
        self, repository: ExecutionRepository
    ) -> None:
        with pytest.raises(ExecutionLeaseError, match="generation is None"):
            await repository.delete("x:1", fence=1, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        assert await repository.tombstone("x:1") is None

    async def test_an_operator_delete_of_an_unknown_execution_leaves_a_tombstone(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """A delete that races the start still blocks it; no generation is invented."""
        stored = await repository.delete(
            "ghost", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
        )

        assert stored == TOMBSTONE
        assert await repository.tombstone("ghost") == TOMBSTONE
        assert await leases.current_generation("ghost") is None

    async def test_a_delete_leaves_other_executions_alone(
        self, repository: ExecutionRepository, store: Store
    ) -> None:
        await store(state("x:1"))
        await store(state("x:2"))

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        assert await repository.load("x:2") == state("x:2")
        assert await repository.tombstone("x:2") is None
        assert [s.execution_id for s in await repository.list()] == ["x:2"]

    @pytest.mark.parametrize("ttl_ms", [0, -1])
    async def test_a_tombstone_ttl_must_be_positive(
        self, repository: ExecutionRepository, ttl_ms: int
    ) -> None:
        with pytest.raises(ValueError, match="tombstone ttl"):
            await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=ttl_ms)
        assert await repository.tombstone("x:1") is None

    # --- node heartbeat (W15, W19) -------------------------------------------------------

    async def test_a_heartbeat_under_the_current_fence_lands_and_round_trips(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        assert await repository.last_heartbeat("x:1") is None

        await repository.heartbeat("x:1", fence=lease.generation, node_id="a", now_ms=NOW_MS)
        assert await repository.last_heartbeat("x:1") == NodeHeartbeat("a", NOW_MS)
        await repository.heartbeat("x:1", fence=lease.generation, node_id="b", now_ms=NOW_MS + 9)
        assert await repository.last_heartbeat("x:1") == NodeHeartbeat("b", NOW_MS + 9)
        assert await repository.last_heartbeat("x:2") is None

    async def test_a_heartbeat_with_a_stale_fence_raises_and_keeps_the_last_one(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        """W4/W15: a holder that lost its lease cannot make the execution look alive."""
        old = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert old is not None
        await repository.heartbeat("x:1", fence=old.generation, node_id="a", now_ms=NOW_MS)
        await leases.release(old)
        new = await leases.acquire("x:1", "w2", ttl_ms=10_000)
        assert new is not None

        with pytest.raises(ExecutionLeaseError, match=r"x:1.*fence \d+.*generation is \d+"):
            await repository.heartbeat("x:1", fence=old.generation, node_id="z", now_ms=NOW_MS + 5)

        assert await repository.last_heartbeat("x:1") == NodeHeartbeat("a", NOW_MS)

    async def test_a_heartbeat_without_any_lease_raises_and_writes_nothing(
        self, repository: ExecutionRepository
    ) -> None:
        with pytest.raises(ExecutionLeaseError, match="generation is None"):
            await repository.heartbeat("x:1", fence=1, node_id="a", now_ms=NOW_MS)
        assert await repository.last_heartbeat("x:1") is None

    async def test_delete_removes_the_heartbeat_and_refuses_later_ones(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.save(state(), fence=lease.generation)
        await repository.heartbeat("x:1", fence=lease.generation, node_id="a", now_ms=NOW_MS)

        await repository.delete(
            "x:1", fence=lease.generation, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
        )

        assert await repository.last_heartbeat("x:1") is None
        with pytest.raises(ExecutionLeaseError, match=r"x:1.*revoked"):
            await repository.heartbeat("x:1", fence=lease.generation, node_id="a", now_ms=NOW_MS)
        assert await repository.last_heartbeat("x:1") is None

    async def test_an_operator_delete_removes_the_heartbeat(
        self, leases: LeaseManager, repository: ExecutionRepository
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.heartbeat("x:1", fence=lease.generation, node_id="a", now_ms=NOW_MS)

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        assert await repository.last_heartbeat("x:1") is None
        with pytest.raises(ExecutionLeaseError):
            await repository.heartbeat("x:1", fence=lease.generation, node_id="a", now_ms=NOW_MS)


class FakeCounters:
    """Stands in for the memory counter store: remembers which executions have counters."""

    def __init__(self) -> None:
        self.present: set[str] = set()

    async def forget(self, execution_id: str) -> None:
        self.present.discard(execution_id)

    async def expire_within(self, execution_id: str, ttl_ms: int) -> None:
        """Counters expiring with a terminal execution are the retention suite's (S5)."""


class CountersElsewhere:
    """For stores whose counters live in another store that a delete asks to forget them
    (memory, SQL): fake counters, and time that passes on the fake clock."""

    @pytest.fixture
    def build(self) -> Build:
        """A repository of the family with these options and no counter store."""
        raise NotImplementedError

    async def test_without_a_counter_store_delete_still_works(self, build: Build) -> None:
        repository = build()

        stored = await repository.delete(
            "x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
        )

        assert stored == TOMBSTONE
        assert await repository.tombstone("x:1") == TOMBSTONE

    async def test_the_heartbeat_expires_after_its_ttl(
        self, build: Build, leases: LeaseManager, advance_clock: Elapse
    ) -> None:
        repository = build(heartbeat_ttl_ms=1_000)
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.heartbeat("x:1", fence=lease.generation, node_id="a", now_ms=NOW_MS)

        await advance_clock(999)
        assert await repository.last_heartbeat("x:1") == NodeHeartbeat("a", NOW_MS)
        await advance_clock(1)
        assert await repository.last_heartbeat("x:1") is None

    @pytest.fixture
    def counters(self) -> FakeCounters:
        return FakeCounters()

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock

    @pytest.fixture
    def seed_counters(self, counters: FakeCounters) -> Probe:
        async def seed(execution_id: str) -> None:
            counters.present.add(execution_id)

        return seed

    @pytest.fixture
    def counters_exist(self, counters: FakeCounters) -> Probe:
        async def exist(execution_id: str) -> bool:
            return execution_id in counters.present

        return exist


class TestMemoryExecutionRepository(CountersElsewhere, ExecutionRepositoryContract):
    @pytest.fixture
    def leases(self, clock: Clock) -> MemoryLeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def repository(
        self, leases: MemoryLeaseManager, counters: FakeCounters
    ) -> MemoryExecutionRepository:
        return MemoryExecutionRepository(leases, counters)

    @pytest.fixture
    def tombstone_ttl(self, repository: MemoryExecutionRepository) -> Probe:
        async def ttl(execution_id: str) -> int | None:
            return repository.tombstone_ttl_ms(execution_id)

        return ttl

    @pytest.fixture
    def build(self, leases: MemoryLeaseManager) -> Build:
        return lambda **options: MemoryExecutionRepository(leases, **options)


class RedisProbes:
    """Probes of the Redis families, read straight from the keys."""

    @pytest.fixture
    def redis_client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self, redis_client: redis.Redis, keys: RedisKeys) -> Elapse:
        """Let ``ms`` pass for every key's TTL: shorten each, expire the ones it reaches.
        Deterministic on a loaded machine, where a real sleep of a short TTL is not."""

        async def elapse(ms: int) -> None:
            async for key in redis_client.scan_iter(match=f"{keys.namespace}:*"):
                left = int(await redis_client.pttl(key))
                if 0 < left <= ms:
                    await redis_client.delete(key)
                elif left > ms:
                    await redis_client.pexpire(key, left - ms)

        return elapse

    @pytest.fixture
    def seed_counters(self, redis_client: redis.Redis, keys: RedisKeys) -> Probe:
        async def seed(execution_id: str) -> None:
            await redis_client.hset(keys.counters(execution_id), mapping={"node:a": 2, "total": 2})

        return seed

    @pytest.fixture
    def counters_exist(self, redis_client: redis.Redis, keys: RedisKeys) -> Probe:
        async def exist(execution_id: str) -> bool:
            return bool(await redis_client.exists(keys.counters(execution_id)))

        return exist

    @pytest.fixture
    def tombstone_ttl(self, redis_client: redis.Redis, keys: RedisKeys) -> Probe:
        async def ttl(execution_id: str) -> int | None:
            left = int(await redis_client.pttl(keys.tombstone(execution_id)))
            return None if left == -2 else left

        return ttl

    async def test_reindex_puts_back_what_the_index_lost(
        self,
        repository: ExecutionRepository,
        store: Store,
        redis_client: redis.Redis,
        keys: RedisKeys,
    ) -> None:
        """K4: after a failover lost the index writes but kept the states, reindex scans the
        state keys (every node of a cluster) and lists them again with their own scores."""
        for n in range(3):
            await store(state(f"x:{n}", updated_at_ms=NOW_MS + n))
        await redis_client.zrem(keys.executions(), "x:0", "x:2")

        assert [s.execution_id for s in await repository.list()] == ["x:1"]
        assert await repository.reindex() == 2
        assert [s.execution_id for s in await repository.list()] == ["x:2", "x:1", "x:0"]
        assert await redis_client.zscore(keys.executions(), "x:2") == NOW_MS + 2
        assert await repository.reindex() == 0

    async def test_the_stored_layout_is_three_hashes_and_a_json_tombstone(
        self,
        repository: ExecutionRepository,
        store: Store,
        redis_client: redis.Redis,
        keys: RedisKeys,
    ) -> None:
        saved = attrs.evolve(state(), node_results={"a": {"ok": 1}}, variables={"v": [1]})
        await store(saved)

        header = await redis_client.hgetall(keys.execution_state("x:1"))
        assert {_text(k): _text(v) for k, v in header.items()}["status"] == '"running"'
        assert {_text(k): _text(v) for k, v in header.items()}["input"] == '{"order":7}'
        nodes = await redis_client.hgetall(keys.execution_nodes("x:1"))
        assert {_text(k): _text(v) for k, v in nodes.items()} == {"a": '{"r":{"ok":1}}'}
        variables = await redis_client.hgetall(keys.execution_vars("x:1"))
        assert {_text(k): _text(v) for k, v in variables.items()} == {"v": "[1]"}

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        assert _text(await redis_client.get(keys.tombstone("x:1"))) == (
            '{"tenant_id":"default","deleted_at_ms":1760000000050,"reason":"operator request"}'
        )
        assert int(_text(await redis_client.get(keys.fence_generation("x:1")))) >= 2
        remaining = [_text(k) async for k in redis_client.scan_iter(match=f"{keys.namespace}:*")]
        assert sorted(remaining) == sorted(
            [keys.execution_indexes(), keys.fence_generation("x:1"), keys.tombstone("x:1")]
        )

    async def test_rejected_writes_leave_the_index_as_it_was(
        self,
        leases: LeaseManager,
        repository: ExecutionRepository,
        store: Store,
        redis_client: redis.Redis,
        keys: RedisKeys,
    ) -> None:
        """A refused delete puts its index entry back; a refused save does not revive one."""
        await store(state("x:1", updated_at_ms=NOW_MS + 7))
        await leases.acquire("x:1", "w2", ttl_ms=10_000)
        with pytest.raises(ExecutionLeaseError):
            await repository.delete("x:1", fence=1, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)
        assert await redis_client.zscore(keys.executions(), "x:1") == NOW_MS + 7

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)
        lease = await leases.acquire("x:1", "w3", ttl_ms=10_000)
        assert lease is not None
        with pytest.raises(ExecutionLeaseError, match="revoked"):
            await repository.save(state("x:1"), fence=lease.generation)
        assert await redis_client.zscore(keys.executions(), "x:1") is None

    async def test_the_heartbeat_is_json_with_a_ttl(
        self, leases: LeaseManager, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        repository = RedisExecutionRepository(redis_client, keys, heartbeat_ttl_ms=60_000)
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None

        await repository.heartbeat("x:1", fence=lease.generation, node_id="a", now_ms=NOW_MS)

        key = keys.execution_heartbeat("x:1")
        assert key == f"{keys.namespace}:x:{{x:1}}:heartbeat"
        assert _text(await redis_client.get(key)) == (
            '{"node_id":"a","last_update_ms":1760000000000}'
        )
        assert 0 < int(await redis_client.pttl(key)) <= 60_000


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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

    async def test_an_incremental_save_and_a_load_are_one_round_trip_each(
        self, counting_client: redis.Redis, keys: RedisKeys, sent: list[bytes]
    ) -> None:
        """P2: the worker's per-node budget is two round trips; the checkpoint takes one."""
        leases = RedisLeaseManager(counting_client, keys)
        repository = RedisExecutionRepository(counting_client, keys)
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        previous = state()
        await repository.save(previous, fence=lease.generation)
        await repository.load("x:1")  # the server learns the load script (NOSCRIPT, load)
        sent.clear()

        for step in range(1, 4):
            current = attrs.evolve(
                previous,
                node_results={**previous.node_results, f"n{step}": step},
                steps=step,
                updated_at_ms=NOW_MS + step,
            )
            await repository.save(current, fence=lease.generation, previous=previous)
            previous = current
        assert len(sent) == 3

        sent.clear()
        assert await repository.load("x:1") == previous
        assert len(sent) == 1

    async def test_a_delete_is_one_round_trip(
        self, counting_client: redis.Redis, keys: RedisKeys, sent: list[bytes]
    ) -> None:
        leases = RedisLeaseManager(counting_client, keys)
        repository = RedisExecutionRepository(counting_client, keys)
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.save(state(), fence=lease.generation)
        await repository.delete("x:0", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)
        sent.clear()

        await repository.delete(
            "x:1", fence=lease.generation, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
        )

        assert len(sent) == 1


def counting(base: type[ConnectionT], sent: list[bytes]) -> type[ConnectionT]:
    """``base`` counting its writes to the socket: one per round trip (a pipeline is one)."""

    class CountingConnection(base):  # type: ignore[valid-type, misc]
        async def send_packed_command(self, command: object, check_health: bool = True) -> None:
            sent.append(b"")
            await super().send_packed_command(command, check_health)

    return CountingConnection


class TestFakeRedisExecutionRepository(RedisProbes, ExecutionRepositoryContract, RedisRoundTrips):
    @pytest.fixture
    def redis_client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis

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
class TestRedisExecutionRepository(RedisProbes, ExecutionRepositoryContract, RedisRoundTrips):
    @pytest.fixture
    def redis_client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis

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

    async def test_a_fresh_server_script_cache_is_reloaded_by_delete(
        self, leases: LeaseManager, repository: ExecutionRepository, real_redis: redis.Redis
    ) -> None:
        lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
        assert lease is not None
        await repository.save(state(), fence=lease.generation)
        await real_redis.script_flush()

        await repository.delete(
            "x:1", fence=lease.generation, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS
        )

        assert await repository.load("x:1") is None
        assert await repository.tombstone("x:1") == TOMBSTONE


# --- SQL (S4): the same contract on SQLite and PostgreSQL ----------------------------------


async def sql_rows(engine: AsyncEngine, table: sa.Table) -> list[dict[str, Any]]:
    """Every row of ``table``, as dicts, in primary key order."""
    query = sa.select(table).order_by(*table.primary_key.columns)
    async with engine.connect() as connection:
        return [dict(row._mapping) for row in await connection.execute(query)]


class SqlProbes(SqlStores, CountersElsewhere):
    """The SQL families: leases and expiries on the fake clock, probes read from the tables.

    The SQL storage keeps no budget counters (they live in the counter store of the queue's
    backend); a delete asks that store to forget them, as the memory twin does.
    """

    @pytest.fixture
    def repository(
        self, engine: AsyncEngine, clock: Clock, counters: FakeCounters
    ) -> SqlExecutionRepository:
        return SqlExecutionRepository(engine, clock=clock, counters=counters)

    @pytest.fixture
    def tombstone_ttl(self, engine: AsyncEngine, clock: Clock) -> Probe:
        async def ttl(execution_id: str) -> int | None:
            for row in await sql_rows(engine, sql_schema.tombstones):
                left = int(row["expires_at_ms"]) - clock.now_ms()
                if row["execution_id"] == execution_id and left > 0:
                    return left
            return None

        return ttl

    async def test_the_stored_layout_is_a_header_row_entry_rows_and_a_json_tombstone(
        self, repository: ExecutionRepository, store: Store, engine: AsyncEngine
    ) -> None:
        """S3: a header row with typed and JSON columns, one row per node entry and variable;
        W13: a delete leaves the lease row (generation moved on) and the tombstone only."""
        saved = attrs.evolve(state(), node_results={"a": {"ok": 1}}, variables={"v": [1]})
        await store(saved)

        (header,) = await sql_rows(engine, sql_schema.executions)
        assert (header["tenant_id"], header["execution_id"]) == ("default", "x:1")
        assert (header["flow_id"], header["status"], header["updated_at_ms"]) == (
            "orders",
            "running",
            NOW_MS,
        )
        assert (header["input"], header["result"], header["suspension"]) == (
            '{"order":7}',
            "null",
            "null",
        )
        assert header["expires_at_ms"] is None
        nodes = await sql_rows(engine, sql_schema.execution_nodes)
        assert [(row["node_id"], row["entry"]) for row in nodes] == [("a", '{"r":{"ok":1}}')]
        variables = await sql_rows(engine, sql_schema.execution_vars)
        assert [(row["name"], row["value"]) for row in variables] == [("v", "[1]")]

        await repository.delete("x:1", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=DAY_MS)

        (tombstone,) = await sql_rows(engine, sql_schema.tombstones)
        assert tombstone["document"] == (
            '{"tenant_id":"default","deleted_at_ms":1760000000050,"reason":"operator request"}'
        )
        (lease,) = await sql_rows(engine, sql_schema.leases)
        assert (lease["generation"], lease["holder_id"], lease["expires_at_ms"]) == (2, None, None)
        for table in (
            sql_schema.executions,
            sql_schema.execution_nodes,
            sql_schema.execution_vars,
            sql_schema.heartbeats,
        ):
            assert await sql_rows(engine, table) == [], table.name

    @pytest.fixture
    def build(self, engine: AsyncEngine, clock: Clock) -> Build:
        return lambda **options: SqlExecutionRepository(engine, clock=clock, **options)

    @pytest.mark.parametrize("ttl_ms", [0, -1])
    def test_ttls_must_be_positive(self, engine: AsyncEngine, clock: Clock, ttl_ms: int) -> None:
        with pytest.raises(ValueError, match="heartbeat ttl"):
            SqlExecutionRepository(engine, clock=clock, heartbeat_ttl_ms=ttl_ms)
        with pytest.raises(ValueError, match="retention"):
            SqlExecutionRepository(engine, clock=clock, retention_ms=ttl_ms)

    # --- retention (S5): a terminal state's expiry and the sweep ------------------------

    async def test_a_state_past_its_retention_reads_as_absent_and_a_step_rewrites_it_whole(
        self, engine: AsyncEngine, clock: Clock, leases: LeaseManager, advance_clock: Elapse
    ) -> None:
        """Like a Redis key past its TTL: gone for every read; a later write (a late retry
        of the same holder) has nothing under its delta, so the whole state is written."""
        repository = SqlExecutionRepository(engine, clock=clock, retention_ms=1_000)
        lease = await leases.acquire("x:1", "w1", ttl_ms=60_000)
        assert lease is not None
        before = attrs.evolve(
            state(status=ExecutionStatus.ERROR), node_results={"old": 1}, variables={"old": 1}
        )
        await repository.save(before, fence=lease.generation)
        await advance_clock(999)
        assert await repository.load("x:1") == before

        await advance_clock(1)

        assert await repository.load("x:1") is None
        assert list(await repository.list()) == []
        assert (await repository.page()).items == ()
        after = attrs.evolve(
            before, status=ExecutionStatus.RUNNING, node_results={"new": 2}, variables={}, steps=1
        )
        await repository.save(after, fence=lease.generation, previous=before)
        assert await repository.load("x:1") == after
        await advance_clock(10_000)
        assert await repository.load("x:1") == after

    async def test_the_retention_runs_from_the_terminal_checkpoint(
        self, engine: AsyncEngine, clock: Clock, leases: LeaseManager, advance_clock: Elapse
    ) -> None:
        repository = SqlExecutionRepository(engine, clock=clock, retention_ms=1_000)
        lease = await leases.acquire("x:1", "w1", ttl_ms=60_000)
        assert lease is not None
        previous = state()
        await repository.save(previous, fence=lease.generation)

        for step in range(1, 4):
            await advance_clock(600)
            current = attrs.evolve(previous, steps=step)
            await repository.save(current, fence=lease.generation, previous=previous)
            previous = current
        done = attrs.evolve(previous, status=ExecutionStatus.COMPLETED, steps=4)
        await repository.save(done, fence=lease.generation, previous=previous)

        await advance_clock(999)
        assert await repository.load("x:1") == done
        await advance_clock(1)
        assert await repository.load("x:1") is None

    async def test_the_sweep_removes_what_expired_and_nothing_else(
        self, engine: AsyncEngine, clock: Clock, leases: LeaseManager, advance_clock: Elapse
    ) -> None:
        repository = SqlExecutionRepository(
            engine, clock=clock, heartbeat_ttl_ms=1_000, retention_ms=1_000
        )
        for execution_id in ("x:old", "x:gone"):
            lease = await leases.acquire(execution_id, "w1", ttl_ms=60_000)
            assert lease is not None
            await repository.save(
                attrs.evolve(
                    state(execution_id, status=ExecutionStatus.COMPLETED),
                    node_results={"a": 1},
                    variables={"v": 1},
                ),
                fence=lease.generation,
            )
            await repository.heartbeat(
                execution_id, fence=lease.generation, node_id="a", now_ms=NOW_MS
            )
        await repository.delete("x:gone", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=500)
        await advance_clock(1_000)
        fresh = await leases.acquire("x:new", "w1", ttl_ms=60_000)
        assert fresh is not None
        await repository.save(state("x:new"), fence=fresh.generation)
        await repository.heartbeat("x:new", fence=fresh.generation, node_id="a", now_ms=NOW_MS)

        # x:old's state and heartbeat, x:gone's tombstone
        removed = await repository.sweep_expired(now_ms=clock.now_ms(), limit=100)

        assert removed == 3
        assert [row["execution_id"] for row in await sql_rows(engine, sql_schema.executions)] == [
            "x:new"
        ]
        for table in (sql_schema.execution_nodes, sql_schema.execution_vars):
            assert {row["execution_id"] for row in await sql_rows(engine, table)} == set()
        assert [r["execution_id"] for r in await sql_rows(engine, sql_schema.heartbeats)] == [
            "x:new"
        ]
        assert await sql_rows(engine, sql_schema.tombstones) == []
        assert await leases.current_generation("x:old") == 1  # generations are never reset
        assert await repository.sweep_expired(now_ms=clock.now_ms(), limit=100) == 0
        assert await repository.load("x:new") == state("x:new")

    async def test_the_sweep_removes_at_most_limit_records_per_call(
        self, repository: SqlExecutionRepository, engine: AsyncEngine, clock: Clock
    ) -> None:
        for n in range(5):
            await repository.delete(
                f"x:{n}", fence=None, tombstone=TOMBSTONE, tombstone_ttl_ms=100 + n
            )
        later = clock.now_ms() + 1_000

        counts = [await repository.sweep_expired(now_ms=later, limit=2) for _ in range(4)]

        assert counts == [2, 2, 1, 0]
        assert await sql_rows(engine, sql_schema.tombstones) == []

    @pytest.mark.parametrize("limit", [0, -1])
    async def test_a_sweep_limit_must_be_positive(
        self, repository: SqlExecutionRepository, limit: int
    ) -> None:
        with pytest.raises(ValueError, match=f"sweep limit .* got {limit}"):
            await repository.sweep_expired(now_ms=NOW_MS, limit=limit)


class TestSqliteExecutionRepository(SqliteEngine, SqlProbes, ExecutionRepositoryContract):
    pass


class TestPostgresExecutionRepository(PostgresEngine, SqlProbes, ExecutionRepositoryContract):
    pass
