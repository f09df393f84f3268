"""Fencing under real concurrency on SQL (W4, W13, S4): many writes from separate pooled
connections race a takeover, a newer holder's writes or a delete — only what the current
generation may write lands, and nothing is torn.

Every write here is a state whose header, node entry and variable carry the same mark, so a
state assembled from two different writes shows up as inconsistent. Run on PostgreSQL (row
locks, READ COMMITTED) and SQLite (one writer at a time).
"""

from __future__ import annotations

import asyncio

import attrs
import pytest

from plaita.adapters.sqlalchemy.lease import SqlLeaseManager
from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository
from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.execution import ExecutionState
from plaita.domain.lease import Lease
from plaita.domain.tombstone import Tombstone

from .conftest import FakeClock
from .sql_fixtures import PostgresEngine, SqliteEngine, SqlStores

NOW_MS = 1_760_000_000_000
TTL_MS = 1_000
ROUNDS = 5
#: Below the default pool (5 + 10 overflow) so every write has a connection of its own.
STALE_WRITES = 10
CURRENT_WRITES = 4
EXECUTION = "x:race"


def marked(previous: ExecutionState, mark: str, step: int) -> ExecutionState:
    return attrs.evolve(
        previous,
        node_results={**previous.node_results, "m": mark},
        variables={**previous.variables, "m": mark},
        result=mark,
        steps=step,
        updated_at_ms=NOW_MS + step,
    )


def mark_of(state: ExecutionState) -> str:
    """The one mark of a state written whole by one writer; AssertionError when torn."""
    marks = {state.node_results["m"], state.variables["m"], state.result}
    assert len(marks) == 1, f"a torn state: {marks}"
    return str(state.result)


START = marked(
    ExecutionState.new(
        execution_id=EXECUTION,
        flow_id="race",
        flow_version="1",
        fingerprint="f" * 64,
        start_node_id="a",
        input={},
        now_ms=NOW_MS,
    ),
    "start",
    0,
)


class FencingRace(SqlStores):
    async def take_over(self, leases: SqlLeaseManager, clock: FakeClock, holder: str) -> Lease:
        clock.advance(TTL_MS)  # whoever held the lease let it lapse
        lease = await leases.acquire(EXECUTION, holder, ttl_ms=TTL_MS)
        assert lease is not None
        return lease

    async def test_stale_writes_never_land_while_the_current_holder_writes(
        self, leases: SqlLeaseManager, repository: SqlExecutionRepository, clock: FakeClock
    ) -> None:
        """W4: each round a new holder takes over; its chain of steps and the previous
        holder's burst of full and incremental saves run at once."""
        stale = await self.take_over(leases, clock, "h0")
        await repository.save(START, fence=stale.generation)
        for round_ in range(1, ROUNDS + 1):
            current = await self.take_over(leases, clock, f"h{round_}")
            loaded = await repository.load(EXECUTION)
            assert loaded is not None

            async def chain(
                previous: ExecutionState = loaded,
                fence: int = current.generation,
                round_: int = round_,
            ) -> ExecutionState:
                for n in range(CURRENT_WRITES):
                    step = marked(previous, f"current:{round_}:{n}", previous.steps + 1)
                    await repository.save(step, fence=fence, previous=previous)
                    previous = step
                return previous

            late = [
                repository.save(
                    marked(loaded, f"stale:{round_}:{n}", 10_000 + n),
                    fence=stale.generation,
                    previous=loaded if n % 2 else None,
                )
                for n in range(STALE_WRITES)
            ]
            last, *refused = await asyncio.gather(chain(), *late, return_exceptions=True)

            assert isinstance(last, ExecutionState), last
            for outcome in refused:
                assert isinstance(outcome, ExecutionLeaseError), outcome
                assert f"fence {stale.generation} rejected" in str(outcome)
                assert f"generation is {current.generation}" in str(outcome)
            stored = await repository.load(EXECUTION)
            assert stored == last
            assert mark_of(stored) == f"current:{round_}:{CURRENT_WRITES - 1}"
            stale = current

    async def test_a_takeover_splits_in_flight_writes_into_before_and_refused(
        self, leases: SqlLeaseManager, repository: SqlExecutionRepository, clock: FakeClock
    ) -> None:
        """W4: writes racing the acquire of the next generation either commit before it —
        and the new holder, loading at once, sees one of them whole — or are refused. Each
        old write adds a node of its own, so one landing after the new holder's load would
        show in the new holder's next checkpoint."""
        for round_ in range(ROUNDS):
            old = await self.take_over(leases, clock, f"old{round_}")
            await repository.save(START, fence=old.generation)
            clock.advance(TTL_MS)

            async def new_holder(round_: int = round_) -> tuple[Lease, ExecutionState, str]:
                lease = await leases.acquire(EXECUTION, f"new{round_}", ttl_ms=TTL_MS)
                assert lease is not None
                loaded = await repository.load(EXECUTION)
                assert loaded is not None
                seen = mark_of(loaded)
                step = marked(loaded, f"new:{round_}", loaded.steps + 1)
                await repository.save(step, fence=lease.generation, previous=loaded)
                return lease, step, seen

            writes = [
                repository.save(
                    attrs.evolve(
                        marked(START, f"old:{round_}:{n}", n + 1),
                        node_results={"m": f"old:{round_}:{n}", f"old:{n}": n},
                    ),
                    fence=old.generation,
                )
                for n in range(STALE_WRITES)
            ]
            *outcomes, taken = await asyncio.gather(*writes, new_holder(), return_exceptions=True)

            assert isinstance(taken, tuple), taken
            new, expected, seen = taken
            assert new.generation == old.generation + 1
            landed = {f"old:{round_}:{n}" for n, o in enumerate(outcomes) if o is None}
            for outcome in outcomes:
                assert outcome is None or isinstance(outcome, ExecutionLeaseError), outcome
            assert seen in landed | {"start"}
            assert await repository.load(EXECUTION) == expected
            await leases.release(new)

    async def test_a_delete_racing_the_holders_writes_leaves_only_the_tombstone(
        self, leases: SqlLeaseManager, repository: SqlExecutionRepository, clock: FakeClock
    ) -> None:
        """W13: an operator delete revokes the holder; no write of its resurrects the state."""
        for round_ in range(ROUNDS):
            execution_id = f"x:deleted:{round_}"
            holder = await leases.acquire(execution_id, "w1", ttl_ms=60_000)
            assert holder is not None
            first = attrs.evolve(START, execution_id=execution_id)
            await repository.save(first, fence=holder.generation)
            tombstone = Tombstone("default", NOW_MS, f"round {round_}")

            writes = [
                repository.save(
                    marked(first, f"w:{n}", n + 1),
                    fence=holder.generation,
                    previous=first if n % 2 else None,
                )
                for n in range(STALE_WRITES)
            ]
            *outcomes, stored = await asyncio.gather(
                *writes,
                repository.delete(
                    execution_id, fence=None, tombstone=tombstone, tombstone_ttl_ms=60_000
                ),
                return_exceptions=True,
            )

            assert stored == tombstone
            for outcome in outcomes:
                assert outcome is None or isinstance(outcome, ExecutionLeaseError), outcome
            assert await repository.load(execution_id) is None
            assert await repository.tombstone(execution_id) == tombstone
            assert await leases.current_generation(execution_id) == holder.generation + 1
            with pytest.raises(ExecutionLeaseError):
                await repository.save(first, fence=holder.generation)


class TestPostgresFencingRace(PostgresEngine, FencingRace):
    pass


class TestSqliteFencingRace(SqliteEngine, FencingRace):
    pass
