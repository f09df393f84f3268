"""ExecutionRepository.page contract (C1, W23): cursor pagination of a tenant's executions.

Run against memory, fakeredis (bytes and str), real Redis, SQLite and PostgreSQL: newest
first by the index score then id, every execution exactly once across pages, filters
applied to candidates (AND) — flow, status and the console's search (``ExecutionQuery``:
creation window, input conditions) —, executions written while paging never shift later
pages, an opaque cursor that is refused with a named error when it was not returned by a
listing, and bounded work per call.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.application.ports import ExecutionRepository, LeaseManager
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import InvalidExecutionQueryError, InvalidOperatorRequestError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.execution_query import ExecutionQuery
from plaita.domain.tombstone import Tombstone

from .conftest import FakeClock
from .sql_fixtures import PostgresEngine, SqliteEngine, SqlStores, StatementLog

NOW_MS = 1_760_000_000_000
Save = Callable[..., Awaitable[ExecutionState]]


def flat(pages: list[list[str]]) -> list[str]:
    return [execution_id for page in pages for execution_id in page]


class PagingContract:
    @pytest.fixture
    def leases(self) -> LeaseManager:
        raise NotImplementedError

    @pytest.fixture
    def repository(self, leases: LeaseManager) -> ExecutionRepository:
        raise NotImplementedError

    @pytest.fixture
    def save(self, leases: LeaseManager, repository: ExecutionRepository) -> Save:
        async def save(
            execution_id: str,
            at_ms: int,
            *,
            flow_id: str = "f",
            status: ExecutionStatus = ExecutionStatus.RUNNING,
            tenant_id: str = "default",
            input: dict[str, Any] | None = None,
            created_at_ms: int | None = None,
        ) -> ExecutionState:
            state = ExecutionState(
                execution_id=execution_id,
                flow_id=flow_id,
                flow_version="1",
                fingerprint="fp",
                status=status,
                created_at_ms=at_ms if created_at_ms is None else created_at_ms,
                updated_at_ms=at_ms,
                tenant_id=tenant_id,
                input=input or {},
                next_node_id=None if status.is_terminal else "n1",
            )
            lease = await leases.acquire(execution_id, "w1", ttl_ms=10_000)
            assert lease is not None
            await repository.save(state, fence=lease.generation)
            await leases.release(lease)
            return state

        return save

    async def walk(
        self, repository: ExecutionRepository, *, limit: int, **filters: object
    ) -> list[list[str]]:
        """Every page of a listing, as lists of ids, following the cursor to the end."""
        pages: list[list[str]] = []
        cursor: str | None = None
        for _ in range(100):
            page = await repository.page(limit=limit, cursor=cursor, **filters)  # type: ignore[arg-type]
            pages.append([state.execution_id for state in page.items])
            if page.next_cursor is None:
                return pages
            cursor = page.next_cursor
        raise AssertionError(f"the listing never ended: {pages}")

    async def test_an_empty_index_gives_an_empty_last_page(
        self, repository: ExecutionRepository
    ) -> None:
        page = await repository.page()
        assert (page.items, page.next_cursor) == ((), None)

    async def test_pages_go_newest_first_and_list_each_execution_once(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        for n in range(7):
            await save(f"x:{n}", NOW_MS + n)

        pages = await self.walk(repository, limit=3)

        assert pages == [["x:6", "x:5", "x:4"], ["x:3", "x:2", "x:1"], ["x:0"]]

    async def test_a_page_holds_whole_states(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        saved = await save("x:1", NOW_MS, status=ExecutionStatus.SUSPENDED)
        page = await repository.page(limit=5)
        assert page.items == (saved,)

    async def test_executions_written_at_the_same_time_are_ordered_by_id_across_pages(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        for name in ("b", "e", "a", "d", "c"):
            await save(name, NOW_MS)
        await save("older", NOW_MS - 1)

        pages = await self.walk(repository, limit=2)

        assert pages == [["e", "d"], ["c", "b"], ["a", "older"]]

    async def test_filters_apply_together_across_the_candidates(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        done = ExecutionStatus.COMPLETED
        for n in range(12):
            flow_id = "f" if n % 2 else "g"
            await save(
                f"x:{n:02}",
                NOW_MS + n,
                flow_id=flow_id,
                status=done if n % 3 else ExecutionStatus.RUNNING,
            )

        by_flow = await self.walk(repository, limit=4, flow_id="f")
        both = await self.walk(repository, limit=2, flow_id="f", status=done)

        assert flat(by_flow) == ["x:11", "x:09", "x:07", "x:05", "x:03", "x:01"]
        assert flat(both) == ["x:11", "x:07", "x:05", "x:01"]
        assert all(len(page) <= 2 for page in both)

    async def test_executions_written_while_paging_do_not_shift_later_pages(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        for n in range(6):
            await save(f"x:{n}", NOW_MS + n)
        first = await repository.page(limit=3)
        await save("newer", NOW_MS + 100)
        await save("x:9", NOW_MS + 101)

        second = await repository.page(limit=3, cursor=first.next_cursor)

        assert [s.execution_id for s in first.items] == ["x:5", "x:4", "x:3"]
        assert [s.execution_id for s in second.items] == ["x:2", "x:1", "x:0"]
        assert second.next_cursor is None

    async def test_a_deleted_execution_is_not_listed(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        for n in range(3):
            await save(f"x:{n}", NOW_MS + n)
        tombstone = Tombstone(tenant_id="default", deleted_at_ms=NOW_MS, reason="test")
        await repository.delete("x:1", fence=None, tombstone=tombstone, tombstone_ttl_ms=60_000)

        assert await self.walk(repository, limit=1) == [["x:2"], ["x:0"]]

    async def test_only_the_current_tenants_executions_are_listed(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        """W24: the tenant comes from the scope, never from a parameter."""
        await save("x:1", NOW_MS)
        with tenant_scope("acme"):
            await save("x:2", NOW_MS + 1, tenant_id="acme")
            acme = await repository.page()
        assert [s.execution_id for s in acme.items] == ["x:2"]
        assert [s.execution_id for s in (await repository.page()).items] == ["x:1"]

    @pytest.mark.parametrize("cursor", ["", "garbage!", "WzEsMl0"])
    async def test_a_cursor_no_listing_returned_is_a_named_error(
        self, repository: ExecutionRepository, cursor: str
    ) -> None:
        with pytest.raises(InvalidOperatorRequestError, match="next_cursor"):
            await repository.page(cursor=cursor)

    @pytest.mark.parametrize("limit", [0, 501])
    async def test_a_limit_out_of_range_is_a_named_error(
        self, repository: ExecutionRepository, limit: int
    ) -> None:
        with pytest.raises(InvalidOperatorRequestError, match=f"got {limit}"):
            await repository.page(limit=limit)

    async def test_a_sparse_filter_returns_early_with_a_cursor_to_go_on_from(
        self, repository: ExecutionRepository, save: Save, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bounded work per call: at most PAGE_SCAN_BUDGET index entries are looked at."""
        monkeypatch.setattr("plaita.adapters.memory.storage.PAGE_SCAN_BUDGET", 4)
        monkeypatch.setattr("plaita.adapters.redis.execution_index.PAGE_SCAN_BUDGET", 4)
        await save("wanted", NOW_MS, flow_id="rare")
        for n in range(9):
            await save(f"x:{n}", NOW_MS + 1 + n)

        pages = await self.walk(repository, limit=5, flow_id="rare")

        assert flat(pages) == ["wanted"]
        assert pages[0] == [] and len(pages) == 3

    # --- the console's search (ExecutionQuery) ----------------------------------------

    async def test_an_input_condition_finds_the_executions_whose_input_holds_it(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        for n in range(6):
            await save(f"x:{n}", NOW_MS + n, input={"customer": {"id": 42 if n % 2 else 7}})
        await save("text", NOW_MS + 10, input={"customer": {"id": "42"}})
        await save("flat", NOW_MS + 11, input={"customer": 42})

        query = ExecutionQuery.build(input_condition="customer.id = 42")
        pages = await self.walk(repository, limit=2, query=query)

        assert flat(pages) == ["text", "x:5", "x:3", "x:1"]
        assert all(len(page) <= 2 for page in pages)

    async def test_the_creation_window_keeps_both_ends(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        for n in range(6):
            await save(f"x:{n}", NOW_MS + 10 * n + 5, created_at_ms=NOW_MS + 10 * n)

        query = ExecutionQuery(created_from_ms=NOW_MS + 10, created_to_ms=NOW_MS + 30)
        pages = await self.walk(repository, limit=2, query=query)

        assert flat(pages) == ["x:3", "x:2", "x:1"]

    async def test_a_query_and_the_flow_and_status_filters_apply_together(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        done = ExecutionStatus.COMPLETED
        await save("a", NOW_MS, input={"k": 1}, flow_id="f", status=done)
        await save("b", NOW_MS + 1, input={"k": 1}, flow_id="g", status=done)
        await save("c", NOW_MS + 2, input={"k": 1}, flow_id="f")
        await save("d", NOW_MS + 3, input={"k": 2}, flow_id="f", status=done)
        query = ExecutionQuery.build(input_condition="k=1")

        page = await repository.page(flow_id="f", status=done, query=query)

        assert [s.execution_id for s in page.items] == ["a"]

    async def test_a_flow_given_twice_differently_is_a_named_error(
        self, repository: ExecutionRepository
    ) -> None:
        with pytest.raises(InvalidExecutionQueryError, match="flow_id"):
            await repository.page(flow_id="f", query=ExecutionQuery(flow_id="g"))

    async def test_a_sparse_search_returns_early_with_a_cursor_to_go_on_from(
        self, repository: ExecutionRepository, save: Save, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bounded work per call: at most PAGE_SCAN_BUDGET executions are looked at."""
        for module in ("memory.storage", "redis.execution_index", "sqlalchemy.storage"):
            monkeypatch.setattr(f"plaita.adapters.{module}.PAGE_SCAN_BUDGET", 4)
        monkeypatch.setattr("plaita.adapters.sqlalchemy.storage.SCAN_BATCH", 3)
        await save("wanted", NOW_MS, input={"rare": True})
        for n in range(9):
            await save(f"x:{n}", NOW_MS + 1 + n)

        query = ExecutionQuery.build(input_condition="rare = true")
        pages = await self.walk(repository, limit=5, query=query)

        assert flat(pages) == ["wanted"]
        assert pages[0] == [] and len(pages) == 3


class TestMemoryPaging(PagingContract):
    @pytest.fixture
    def leases(self, clock: FakeClock) -> LeaseManager:
        return MemoryLeaseManager(clock)

    @pytest.fixture
    def repository(self, leases: LeaseManager) -> ExecutionRepository:
        assert isinstance(leases, MemoryLeaseManager)
        return MemoryExecutionRepository(leases)


class RedisPagingContract(PagingContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def leases(self, client: redis.Redis, keys: RedisKeys) -> LeaseManager:
        return RedisLeaseManager(client, keys)

    @pytest.fixture
    def repository(self, client: redis.Redis, keys: RedisKeys) -> ExecutionRepository:
        return RedisExecutionRepository(client, keys)

    async def test_an_index_entry_without_a_state_is_skipped(
        self, repository: ExecutionRepository, save: Save, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await save("x:1", NOW_MS)
        await client.zadd(keys.executions(), {"ghost": NOW_MS + 5})

        assert await self.walk(repository, limit=1) == [["x:1"]]
        assert flat(await self.walk(repository, limit=1, flow_id="f")) == ["x:1"]


class TestFakeRedisPaging(RedisPagingContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisPaging(RedisPagingContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


class SqlPaging(SqlStores, PagingContract):
    """On SQL the filters run in the query, on an index that holds the page order."""

    async def test_a_sparse_filter_returns_early_with_a_cursor_to_go_on_from(
        self, repository: ExecutionRepository, save: Save
    ) -> None:
        """Bounded work per call, by the index instead of PAGE_SCAN_BUDGET: the filter's
        index holds only matching executions (see the next test), so a sparse match comes
        on the first page and every page but the last is full."""
        await save("wanted", NOW_MS, flow_id="rare")
        await save("also", NOW_MS - 1, flow_id="rare")
        for n in range(9):
            await save(f"x:{n}", NOW_MS + 1 + n)

        assert await self.walk(repository, limit=5, flow_id="rare") == [["wanted", "also"]]
        assert await self.walk(repository, limit=1, flow_id="rare") == [["wanted"], ["also"]]

    @pytest.mark.parametrize(
        ("filters", "index"),
        [
            pytest.param({}, "ix_executions_updated", id="all"),
            pytest.param({"flow_id": "f"}, "ix_executions_flow", id="flow"),
            pytest.param({"status": ExecutionStatus.RUNNING}, "ix_executions_status", id="status"),
            pytest.param(
                {"flow_id": "f", "status": ExecutionStatus.RUNNING},
                "ix_executions_flow_status",
                id="flow-and-status",
            ),
        ],
    )
    async def test_each_listing_filter_reads_its_index_in_page_order(
        self,
        repository: ExecutionRepository,
        save: Save,
        engine: AsyncEngine,
        filters: dict[str, object],
        index: str,
    ) -> None:
        """C1: the console's filters are served by an index, in the page's order (no sort),
        also past a cursor. The table holds enough rows, with statistics, that only the
        filter's own index is a good plan."""
        done = ExecutionStatus.COMPLETED
        for n in range(40):
            await save(f"x:{n:02}", NOW_MS + n, flow_id="g", status=done)
        for name, flow_id, status in [
            ("f1", "f", ExecutionStatus.RUNNING),
            ("f2", "f", ExecutionStatus.RUNNING),
            ("r1", "g", ExecutionStatus.RUNNING),
            ("r2", "g", ExecutionStatus.RUNNING),
            ("c1", "f", done),
            ("c2", "f", done),
        ]:
            await save(name, NOW_MS + 100, flow_id=flow_id, status=status)
        async with engine.begin() as connection:
            await connection.exec_driver_sql("ANALYZE")
        first = await repository.page(limit=1, **filters)  # type: ignore[arg-type]
        assert first.next_cursor is not None
        log = StatementLog(engine)

        await repository.page(limit=1, cursor=first.next_cursor, **filters)  # type: ignore[arg-type]

        statement, parameters = next(
            (sql, args) for sql, args in log.statements if "FROM executions" in sql
        )
        plan = await query_plan(engine, statement, parameters)
        assert re.search(rf"\b{index}\b", plan), plan
        assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan


async def query_plan(engine: AsyncEngine, statement: str, parameters: Any) -> str:
    """The database's plan of ``statement``, as text (sequential scans off on PostgreSQL, so
    a tiny table still shows which index could serve the query)."""
    async with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            await connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
            rows = await connection.exec_driver_sql(f"EXPLAIN {statement}", parameters)
        else:
            rows = await connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
        return "\n".join(" ".join(str(part) for part in row) for row in rows)


class TestSqlitePaging(SqliteEngine, SqlPaging):
    pass


class TestPostgresPaging(PostgresEngine, SqlPaging):
    pass
