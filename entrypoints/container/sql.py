"""The SQL family (``storage=sql``, S4): state, leases and flows in a database.

The SQLAlchemy adapters are imported only when a provider here is first called, like the
Redis client: a process without ``storage=sql`` never loads them.
"""

from __future__ import annotations

from typing import Any

from dependency_injector import containers, providers

from plaita.application.ports import Clock, CounterStore, ExecutionControls


def sql_engine(database_url: str, concurrency: int) -> Any:
    from plaita.adapters.sqlalchemy.engine import create_engine

    # Every step's transaction holds a pooled connection: size the pool from the concurrency.
    return create_engine(database_url, pool_size=5, max_overflow=max(10, concurrency))


def _executions(engine: Any, clock: Any, counters: Any, controls: Any, retention_ms: int) -> Any:
    from plaita.adapters.sqlalchemy.storage import SqlExecutionRepository

    # The database keeps no budget counters and no operator flags: a delete forgets the
    # memory twin's counters and the backend's flags, and a terminal checkpoint lets the
    # flags expire with the retention (S5).
    return SqlExecutionRepository(
        engine, clock=clock, counters=counters, controls=controls, retention_ms=retention_ms
    )


def _leases(engine: Any, clock: Any) -> Any:
    from plaita.adapters.sqlalchemy.lease import SqlLeaseManager

    return SqlLeaseManager(engine, clock)


def _flows(engine: Any) -> Any:
    from plaita.adapters.sqlalchemy.flows import SqlFlowRepository

    return SqlFlowRepository(engine)


def _schedules(engine: Any, clock: Any) -> Any:
    from plaita.adapters.sqlalchemy.schedules import SqlScheduleStore

    return SqlScheduleStore(engine, clock)


def _hooks(engine: Any) -> Any:
    from plaita.adapters.sqlalchemy.hooks import SqlHookStore

    return SqlHookStore(engine)


async def upgrade_schema(database_url: str, revision: str = "head") -> str:
    """Create the schema or migrate it up to ``revision``; the revision it is at after."""
    from plaita.adapters.sqlalchemy import migrations

    return await migrations.upgrade(database_url, revision)


async def schema_revision(database_url: str) -> str | None:
    """The schema's migration revision; None before the first upgrade."""
    from plaita.adapters.sqlalchemy import migrations

    return await migrations.current(database_url)


class SqlStores(containers.DeclarativeContainer):
    config = providers.Configuration()
    clock: providers.Dependency[Clock] = providers.Dependency()
    engine: providers.Dependency[Any] = providers.Dependency()
    #: What a delete forgets beside the row (the memory twin's counters, or None: Redis
    #: counters expire on their own) and the backend's operator flags.
    counters: providers.Dependency[CounterStore | None] = providers.Dependency()
    controls: providers.Dependency[ExecutionControls] = providers.Dependency()

    leases = providers.Singleton(_leases, engine, clock)
    executions = providers.Singleton(
        _executions, engine, clock, counters, controls, config.retention_ms
    )
    flows = providers.Singleton(_flows, engine)
    #: Cron schedules (W22), beside the flows they start.
    schedules = providers.Singleton(_schedules, engine, clock)
    hooks = providers.Singleton(_hooks, engine)
