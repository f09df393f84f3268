"""Async engines of the SQL storage and the two kinds of transaction it runs (S4).

SQLite runs through aiosqlite, PostgreSQL through asyncpg. On SQLite every connection uses
WAL (readers never block the writer), foreign keys, a busy timeout and ``synchronous=FULL``
(a committed checkpoint survives a power cut, not only a process crash). pysqlite's own
transaction handling is switched off and plaita emits BEGIN itself: write transactions begin
IMMEDIATE, taking the write lock before their first read. A deferred transaction that reads
the lease row and then writes would get SQLITE_BUSY, without waiting, whenever another
connection committed in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from plaita.domain.errors import DatabaseSchemaError, InvalidDatabaseUrlError

ACCEPTED_URLS = (
    "sqlite:///PATH, sqlite+aiosqlite:///PATH, postgresql://USER@HOST:PORT/DB "
    "or postgresql+asyncpg://USER@HOST:PORT/DB"
)
_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
#: How long a SQLite writer waits for another connection's write lock before it fails.
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: Execution option naming how a SQLite transaction begins (DEFERRED or IMMEDIATE).
SQLITE_BEGIN = "plaita_sqlite_begin"
_BEGIN_MODES = frozenset({"DEFERRED", "IMMEDIATE"})
_WAL_RETRY_MS = 20

log = logging.getLogger("plaita.sql")


def create_engine(url: str, *, pool_size: int = 5, max_overflow: int = 10) -> AsyncEngine:
    """An engine for ``url`` (see ``ACCEPTED_URLS``); InvalidDatabaseUrlError otherwise.

    Every transaction holds a pooled connection: a worker running many executions at once
    wants ``pool_size + max_overflow`` near its concurrency, or steps wait for connections.
    """
    parsed = database_url(url)
    pool = {"pool_size": pool_size, "max_overflow": max_overflow}
    if parsed.get_backend_name() == "sqlite":
        engine = create_async_engine(
            parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **pool
        )
        event.listen(engine.sync_engine, "connect", _configure_sqlite)
        event.listen(engine.sync_engine, "begin", _begin_sqlite)
        return engine
    return create_async_engine(parsed, **pool)


def database_url(url: str) -> URL:
    """``url`` with its async driver, or InvalidDatabaseUrlError naming it (password masked)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InvalidDatabaseUrlError(
            f"{masked(url)!r} is not a database URL; use {ACCEPTED_URLS}"
        ) from None
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise InvalidDatabaseUrlError(
            f"database URL {masked(url)!r} uses {parsed.drivername!r}, which plaita's SQL "
            f"storage does not support; use {ACCEPTED_URLS}"
        )
    parsed = parsed.set(drivername=driver)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise InvalidDatabaseUrlError(
            f"database URL {masked(url)!r} names no SQLite file; durable storage needs one, "
            "e.g. sqlite:///plaita.db (for state kept in memory choose the memory storage)"
        )
    if "sslmode" in parsed.query:
        # libpq's spelling, as most PostgreSQL URLs carry it; asyncpg calls the option ssl.
        query = dict(parsed.query)
        query["ssl"] = query.pop("sslmode")
        parsed = parsed.set(query=query)
    return parsed


def masked(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # plaita emits BEGIN itself (_begin_sqlite)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _use_wal(dbapi_connection, cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=FULL")
    finally:
        cursor.close()


def _use_wal(dbapi_connection: Any, cursor: Any) -> None:
    """Switch the database to WAL (once per file; a no-op after).

    The switch needs an exclusive lock, and SQLite refuses it at once ("database is
    locked", no busy handler) while another connection holds any lock — as when several
    processes open a new database together. Retry, waiting without blocking the event
    loop, for up to the busy timeout.
    """
    for _ in range(SQLITE_BUSY_TIMEOUT_MS // _WAL_RETRY_MS):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            dbapi_connection.run_async(lambda _driver: asyncio.sleep(_WAL_RETRY_MS / 1000))
            continue
        (mode,) = cursor.fetchone()
        if mode != "wal":
            log.warning(
                "event=sqlite.wal_unavailable journal_mode=%s: readers will wait for writers; "
                "keep the database file on a local filesystem that supports WAL",
                mode,
            )
        return
    cursor.execute("PRAGMA journal_mode=WAL")  # the last try: its error is the one to report


def _begin_sqlite(connection: Connection) -> None:
    mode = connection.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
    if mode not in _BEGIN_MODES:
        raise ValueError(f"{SQLITE_BEGIN} must be one of {sorted(_BEGIN_MODES)}, got {mode!r}")
    connection.exec_driver_sql(f"BEGIN {mode}")


# --- transactions -------------------------------------------------------------------------


def writer(engine: AsyncEngine) -> AsyncEngine:
    """``engine`` for write transactions: BEGIN IMMEDIATE on SQLite (PostgreSQL ignores it;
    its row locks do the same job, see ``fencing``)."""
    return engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})


def reader(engine: AsyncEngine) -> AsyncEngine:
    """``engine`` for reads that span several statements and must see one snapshot.

    PostgreSQL's default READ COMMITTED takes a snapshot per statement, so a save committing
    between the header and the node rows would tear the state a load returns; REPEATABLE
    READ keeps one snapshot (a read-only transaction never fails to serialise). A SQLite
    transaction keeps the snapshot of its first read anyway.
    """
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="REPEATABLE READ")
    return engine


@contextlib.asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One transaction; a missing table becomes DatabaseSchemaError saying what to run."""
    try:
        async with engine.begin() as connection:
            yield connection
    except DBAPIError as exc:
        if _missing_table(exc):
            raise DatabaseSchemaError(
                f"the database at {masked(engine.url.render_as_string())} has no plaita "
                f"schema ({exc.orig}); create it with `plaita db upgrade`"
            ) from exc
        raise


def _missing_table(exc: DBAPIError) -> bool:
    if getattr(exc.orig, "sqlstate", None) == "42P01":  # PostgreSQL: undefined_table
        return True
    return "no such table" in str(exc.orig)
