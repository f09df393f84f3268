"""What a checkpoint costs on SQL, counted, not timed (S3, P3 — the SQL side of
``test_checkpoint_costs``).

A listener on the engine records every statement and its parameters. A steady-state step
(a save with ``previous``) is three statements whatever the run's length: the fence (a
conditional UPDATE of the lease row), an UPDATE of exactly the header columns the step
changed, and one upsert of the node entry it wrote. What it sends stays flat from step 10 to
step 1000; a full save at step 1000 is shown to be what it would be otherwise.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.sqlalchemy.lease import SqlLeaseManager
from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository
from plaita.domain.checkpoint import encode_value
from plaita.domain.execution import ExecutionState

from .conftest import FakeClock
from .sql_fixtures import PostgresEngine, SqliteEngine, StatementLog
from .test_checkpoint_costs import FLAT_SLACK_BYTES, STEPS, report, started, step

STEADY_STATE = ["UPDATE leases", "UPDATE executions", "INSERT INTO execution_nodes"]
#: The header fields a step of the chain changes (``test_checkpoint_costs.step``).
CHANGED_COLUMNS = {"updated_at_ms", "steps", "last_node_id", "next_node_id"}


def set_columns(statement: str) -> set[str]:
    """The columns an ``UPDATE … SET a=…, b=… WHERE …`` writes."""
    found = re.search(r" SET (.*) WHERE ", statement)
    assert found is not None, statement
    return {assignment.split("=")[0].strip() for assignment in found.group(1).split(", ")}


async def run_chain(
    store: SqlExecutionRepository, fence: int, log: StatementLog, *, steps: int
) -> tuple[ExecutionState, dict[int, int]]:
    """Save a new execution, then ``steps`` steps of the chain, each with ``previous``.

    Every step must be the steady state: the fence, the changed header columns, its node
    row. Returns the last state and what each step sent, by step number.
    """
    previous = started()
    await store.save(previous, fence=fence)
    sent: dict[int, int] = {}
    for number in range(1, steps + 1):
        current = step(previous, number)
        log.clear()
        await store.save(current, fence=fence, previous=previous)
        assert log.verbs == STEADY_STATE, number
        (update, _), (_, node_row) = log.statements[1:]
        assert set_columns(update) == CHANGED_COLUMNS
        entry = encode_value({"r": {"ok": True, "i": number}})
        assert list(node_row) == ["default", "x:cost", f"n{number}", entry]
        sent[number] = log.bytes
        previous = current
    return previous, sent


class SqlCheckpointCosts:
    @pytest.fixture
    async def repository(
        self, engine: AsyncEngine, clock: FakeClock
    ) -> AsyncIterator[tuple[SqlExecutionRepository, int]]:
        lease = await SqlLeaseManager(engine, clock).acquire("x:cost", "w1", ttl_ms=60_000)
        assert lease is not None
        yield SqlExecutionRepository(engine, clock=clock), lease.generation

    async def test_a_steady_state_step_writes_its_node_row_and_changed_columns_only(
        self,
        repository: tuple[SqlExecutionRepository, int],
        engine: AsyncEngine,
        request: pytest.FixtureRequest,
    ) -> None:
        store, fence = repository
        log = StatementLog(engine)

        last, _ = await run_chain(store, fence, log, steps=3)

        report(request, statements_per_step=len(log.statements))
        assert await store.load("x:cost") == last

    async def test_an_unchanged_state_costs_the_fence_and_one_read(
        self, repository: tuple[SqlExecutionRepository, int], engine: AsyncEngine
    ) -> None:
        """A save whose delta is empty still proves the fence and that the state is there,
        and writes nothing else."""
        store, fence = repository
        log = StatementLog(engine)
        last, _ = await run_chain(store, fence, log, steps=1)
        log.clear()

        await store.save(last, fence=fence, previous=last)

        assert log.verbs == ["UPDATE leases", "SELECT"]
        assert await store.load("x:cost") == last

    async def test_statements_and_bytes_per_step_are_flat_from_step_10_to_step_1000(
        self,
        repository: tuple[SqlExecutionRepository, int],
        engine: AsyncEngine,
        request: pytest.FixtureRequest,
    ) -> None:
        """S3 / P3: a step sends what it changed, whatever the number of steps before it."""
        store, fence = repository
        log = StatementLog(engine)

        previous, sent = await run_chain(store, fence, log, steps=STEPS)

        assert max(sent[n] for n in range(10, STEPS + 1)) <= sent[10] + FLAT_SLACK_BYTES
        assert await store.load("x:cost") == previous

        # The same state written in full: what a non-incremental store would send.
        log.clear()
        await store.save(previous, fence=fence)
        full_at_1000 = log.bytes
        assert full_at_1000 > 20 * sent[STEPS]
        report(
            request,
            bytes_step_10=sent[10],
            bytes_step_1000=sent[STEPS],
            bytes_full_save_step_1000=full_at_1000,
        )
        assert await store.load("x:cost") == previous


class TestSqliteCheckpointCosts(SqliteEngine, SqlCheckpointCosts):
    pass


class TestPostgresCheckpointCosts(PostgresEngine, SqlCheckpointCosts):
    pass
