"""The SQL storage's schema and engines (S4): what `plaita db upgrade` creates, on SQLite and
PostgreSQL, is exactly ``schema.metadata``; the storage runs on it; a database without it, a
revision plaita does not know and a URL it cannot use are named errors.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from plaita.adapters.sqlalchemy import migrations
from plaita.adapters.sqlalchemy.engine import SQLITE_BUSY_TIMEOUT_MS, create_engine, database_url
from plaita.adapters.sqlalchemy.flows import SqlFlowRepository
from plaita.adapters.sqlalchemy.lease import SqlLeaseManager
from plaita.adapters.sqlalchemy.schema import HEADER_FIELDS, metadata
from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository
from plaita.domain.checkpoint import header_of
from plaita.domain.errors import DatabaseSchemaError, InvalidDatabaseUrlError
from plaita.domain.flow_owners import SHARED, FlowOwner

from .conftest import FakeClock
from .sql_fixtures import fresh_postgres_database, postgres_url, sqlite_url
from .test_execution_repository_contract import state
from .test_flow_repository_contract import flow

#: The newest migration (0008: the parent of a child execution, the open fork).
HEAD = "0008"


def differences(connection: Connection, target: sa.MetaData) -> list[Any]:
    """What Alembic's autogenerate would change to turn the database into ``target``."""
    context = MigrationContext.configure(
        connection, opts={"version_table": migrations.VERSION_TABLE, "compare_type": True}
    )
    return list(compare_metadata(context, target))


async def schema_differences(url: str, target: sa.MetaData = metadata) -> list[Any]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(differences, target)
    finally:
        await engine.dispose()


class MigrationContract:
    @pytest.fixture
    def url(self) -> str:
        """A database with nothing in it."""
        raise NotImplementedError

    async def test_upgrade_creates_exactly_the_schema_of_the_metadata(self, url: str) -> None:
        assert await migrations.current(url) is None

        reached = await migrations.upgrade(url)

        assert reached == migrations.head() == HEAD
        assert await migrations.current(url) == HEAD
        assert await schema_differences(url) == []

    async def test_the_comparison_sees_a_schema_that_differs(self, url: str) -> None:
        """The check above is not vacuous: one column more in the models is a difference."""
        await migrations.upgrade(url)
        other = sa.MetaData()
        for table in metadata.sorted_tables:
            table.to_metadata(other)
        other.tables["executions"].append_column(sa.Column("owner", sa.String, nullable=True))

        found = await schema_differences(url, other)

        # ("add_column", schema, table, column)
        assert [(d[0], d[2], d[3].name) for d in found] == [("add_column", "executions", "owner")]

    async def test_upgrading_again_changes_nothing_and_keeps_the_data(
        self, url: str, clock: FakeClock
    ) -> None:
        await migrations.upgrade(url)
        engine = create_engine(url)
        try:
            leases = SqlLeaseManager(engine, clock)
            repository = SqlExecutionRepository(engine, clock=clock)
            lease = await leases.acquire("x:1", "w1", ttl_ms=10_000)
            assert lease is not None
            await repository.save(state(), fence=lease.generation)

            assert await migrations.upgrade(url) == HEAD

            assert await repository.load("x:1") == state()
        finally:
            await engine.dispose()

    async def test_flows_stored_before_owners_existed_become_deployment_wide(
        self, url: str
    ) -> None:
        """0002 (ADR 0011): every definition was shared before tenants owned flows, so an
        upgraded database keeps serving it to every tenant, under its old latest."""
        await migrations.upgrade(url, "0001")
        old, older = flow(version="2", handler="shop:charge_v2"), flow(version="1")
        engine = create_engine(url)
        try:
            async with engine.begin() as connection:
                for stored in (older, old):
                    await connection.execute(
                        sa.text(
                            "INSERT INTO flows (flow_id, version, document, fingerprint) "
                            "VALUES (:flow_id, :version, :document, :fingerprint)"
                        ),
                        {
                            "flow_id": stored.flow_id,
                            "version": stored.version,
                            "document": json.dumps(stored.to_document()),
                            "fingerprint": stored.fingerprint,
                        },
                    )
                await connection.execute(
                    sa.text("INSERT INTO flow_latest (flow_id, version) VALUES ('orders', '2')")
                )

            assert await migrations.upgrade(url) == HEAD

            flows = SqlFlowRepository(engine)
            latest = await flows.get("orders", owner=SHARED)
            assert latest is not None and latest.fingerprint == old.fingerprint
            assert list(await flows.list_ids(owner=SHARED)) == ["orders"]
            assert await flows.get("orders", owner=FlowOwner.tenant("default")) is None
            # The owner is part of the key now: a tenant may keep its own version 1.
            assert await flows.put_if_absent(older, owner=FlowOwner.tenant("acme")) is None
            assert await schema_differences(url) == []
        finally:
            await engine.dispose()

    async def test_concurrent_upgrades_migrate_once(self, url: str) -> None:
        """Two processes starting at once (two workers) both find the schema at head."""
        reached = await asyncio.gather(*(migrations.upgrade(url) for _ in range(3)))

        assert reached == [HEAD, HEAD, HEAD]
        assert await schema_differences(url) == []

    async def test_an_unknown_revision_is_a_named_error(self, url: str) -> None:
        with pytest.raises(DatabaseSchemaError, match=r"'nope'.*pass 'head'"):
            await migrations.upgrade(url, "nope")
        assert await migrations.current(url) is None

    async def test_a_database_a_newer_plaita_migrated_is_a_named_error(self, url: str) -> None:
        await migrations.upgrade(url)
        engine = create_engine(url)
        try:
            async with engine.begin() as connection:
                await connection.exec_driver_sql(
                    f"UPDATE {migrations.VERSION_TABLE} SET version_num = '9999'"
                )
        finally:
            await engine.dispose()

        with pytest.raises(DatabaseSchemaError, match="upgrade plaita"):
            await migrations.upgrade(url)

    async def test_storage_on_a_database_without_the_schema_says_to_upgrade(
        self, url: str, clock: FakeClock
    ) -> None:
        engine = create_engine(url)
        try:
            repository = SqlExecutionRepository(engine, clock=clock)
            with pytest.raises(DatabaseSchemaError, match="plaita db upgrade"):
                await repository.load("x:1")
            with pytest.raises(DatabaseSchemaError, match="plaita db upgrade"):
                await SqlLeaseManager(engine, clock).acquire("x:1", "w1", ttl_ms=1_000)
        finally:
            await engine.dispose()


class TestSqliteMigrations(MigrationContract):
    @pytest.fixture
    def url(self, tmp_path: Path) -> str:
        return sqlite_url(tmp_path)

    async def test_connections_use_wal_foreign_keys_and_a_busy_timeout(self, url: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                pragmas = {
                    name: await connection.scalar(sa.text(f"PRAGMA {name}"))
                    for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
                }
        finally:
            await engine.dispose()
        assert pragmas == {
            "journal_mode": "wal",
            "foreign_keys": 1,
            "busy_timeout": SQLITE_BUSY_TIMEOUT_MS,
            "synchronous": 2,  # FULL
        }


@pytest.mark.postgres
class TestPostgresMigrations(MigrationContract):
    @pytest.fixture
    async def url(self) -> AsyncIterator[str]:
        async with fresh_postgres_database(postgres_url()) as url:
            yield url


def test_every_checkpoint_header_field_has_a_column() -> None:
    """A field added to the checkpoint header needs a column and a migration (S3)."""
    every_field_set = attrs.evolve(state(), dedup_key="k", subgraph_fingerprint="s")

    assert set(header_of(every_field_set)) == HEADER_FIELDS


# --- database URLs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///plaita.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:////var/lib/plaita/plaita.db", "sqlite+aiosqlite"),
        ("postgresql://plaita@db:5432/plaita", "postgresql+asyncpg"),
        ("postgresql+asyncpg://plaita:secret@db/plaita", "postgresql+asyncpg"),
    ],
)
def test_accepted_urls_get_their_async_driver(url: str, driver: str) -> None:
    assert database_url(url).drivername == driver


def test_libpq_sslmode_becomes_asyncpgs_ssl() -> None:
    parsed = database_url("postgresql://plaita@db/plaita?sslmode=require")

    assert dict(parsed.query) == {"ssl": "require"}


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mysql://plaita:hunter2@db/plaita", "'mysql'"),
        ("postgresql+psycopg2://plaita:hunter2@db/plaita", "'postgresql+psycopg2'"),
        ("not a url", "not a database URL"),
        ("sqlite://", "names no SQLite file"),
        ("sqlite:///:memory:", "names no SQLite file"),
    ],
)
def test_other_urls_are_named_errors_that_hide_the_password(url: str, problem: str) -> None:
    with pytest.raises(InvalidDatabaseUrlError, match=re.escape(problem)) as raised:
        create_engine(url)

    message = str(raised.value)
    assert "hunter2" not in message
    assert "postgresql://USER@HOST:PORT/DB" in message or "sqlite:///plaita.db" in message
    if "hunter2" in url:
        assert "plaita:***@db" in message
