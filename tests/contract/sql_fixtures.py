"""Shared pieces of the SQL contract runs (S4): fresh databases and a statement log.

SQLite: a new database file under the test's ``tmp_path``. PostgreSQL: the database at
``PLAITA_TEST_DATABASE_URL`` (skipped only when unset; CI always sets it), with a new schema
per test that every connection of the engine uses through ``search_path`` and that is
dropped afterwards — tests never see each other's rows and may run side by side. The schema
is created from ``schema.metadata``; ``test_sql_migrations`` proves the migrations create
the same one.

The contract suites subclass ``SqliteEngine`` or ``PostgresEngine`` to get an ``engine``,
and ``SqlStores`` for the lease manager and repository on it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.sqlalchemy.engine import create_engine
from plaita.adapters.sqlalchemy.lease import SqlLeaseManager
from plaita.adapters.sqlalchemy.schema import metadata
from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository
from plaita.application.ports import Clock

DATABASE_URL_VARIABLE = "PLAITA_TEST_DATABASE_URL"
DATABASE_SKIP_REASON = f"{DATABASE_URL_VARIABLE} is unset; CI always sets it"


def postgres_url() -> str:
    """The test PostgreSQL's URL; skips the test when it is unset."""
    url = os.environ.get(DATABASE_URL_VARIABLE)
    if not url:
        pytest.skip(DATABASE_SKIP_REASON)
    return url


def sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'plaita.db'}"


@contextlib.asynccontextmanager
async def fresh_postgres_schema(url: str) -> AsyncIterator[AsyncEngine]:
    """An engine whose every connection works in a new, empty schema; dropped after."""
    schema = f"plaita_test_{uuid.uuid4().hex}"
    admin = create_engine(url)
    try:
        async with admin.begin() as connection:
            await connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        engine = create_engine(url)

        @event.listens_for(engine.sync_engine, "connect")
        def use_schema(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.run_async(
                lambda driver: driver.execute(f'SET search_path TO "{schema}"')
            )

        try:
            yield engine
        finally:
            await engine.dispose()
            async with admin.begin() as connection:
                await connection.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        await admin.dispose()


@contextlib.asynccontextmanager
async def fresh_postgres_database(url: str) -> AsyncIterator[str]:
    """The URL of a new, empty database next to ``url``'s; dropped after.

    For what must run through a URL alone (the migrations ``plaita db upgrade`` runs),
    where a per-connection search_path cannot be set.
    """
    name = f"plaita_test_{uuid.uuid4().hex}"
    admin = create_engine(url)
    try:
        async with admin.connect() as connection:
            autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
            await autocommit.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(url).set(database=name).render_as_string(hide_password=False)
        finally:
            async with admin.connect() as connection:
                autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
                await autocommit.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await admin.dispose()


async def create_schema(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(metadata.create_all)


class SqliteEngine:
    """A fresh SQLite database file per test, schema created."""

    @pytest.fixture
    async def engine(self, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
        engine = create_engine(sqlite_url(tmp_path))
        await create_schema(engine)
        yield engine
        await engine.dispose()


@pytest.mark.postgres
class PostgresEngine:
    """A fresh schema per test in the PostgreSQL at PLAITA_TEST_DATABASE_URL, created."""

    @pytest.fixture
    async def engine(self) -> AsyncIterator[AsyncEngine]:
        async with fresh_postgres_schema(postgres_url()) as engine:
            await create_schema(engine)
            yield engine


class SqlStores:
    """The SQL lease manager and repository on the test's ``engine`` and fake clock."""

    @pytest.fixture
    def leases(self, engine: AsyncEngine, clock: Clock) -> SqlLeaseManager:
        return SqlLeaseManager(engine, clock)

    @pytest.fixture
    def repository(self, engine: AsyncEngine, clock: Clock) -> SqlExecutionRepository:
        return SqlExecutionRepository(engine, clock=clock)


class StatementLog:
    """The SQL statements an engine sent, with their parameters, in order (BEGIN left out)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.statements: list[tuple[str, Any]] = []
        event.listen(engine.sync_engine, "before_cursor_execute", self._record)

    def _record(
        self, _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
    ) -> None:
        if not statement.lstrip().upper().startswith("BEGIN"):
            self.statements.append((" ".join(statement.split()), parameters))

    def clear(self) -> None:
        self.statements.clear()

    @property
    def verbs(self) -> list[str]:
        """Each statement's verb and table: ``UPDATE leases``, ``INSERT INTO execution_nodes``."""
        return [_verb(statement) for statement, _ in self.statements]

    @property
    def bytes(self) -> int:
        """What the statements sent: their text and the text of their parameters."""
        return sum(
            len(statement) + len(repr(parameters)) for statement, parameters in self.statements
        )


def _verb(statement: str) -> str:
    words = statement.split()
    if words[0] == "INSERT":
        return " ".join(words[:3])
    if words[0] == "UPDATE":
        return " ".join(words[:2])
    if words[0] == "DELETE":
        return " ".join(words[:3])
    return words[0]
