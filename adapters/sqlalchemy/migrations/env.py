"""The Alembic environment of plaita's SQL storage (S4).

``plaita.adapters.sqlalchemy.migrations`` runs it with an open connection in
``config.attributes["connection"]``; without one (a developer's ``command.revision(…,
autogenerate=True)`` on ``alembic_config(url=…)``) it opens the URL itself.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from plaita.adapters.sqlalchemy.engine import create_engine
from plaita.adapters.sqlalchemy.migrations import VERSION_TABLE
from plaita.adapters.sqlalchemy.schema import metadata
from plaita.domain.errors import InvalidDatabaseUrlError


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        # SQLite alters a table by copying it; later migrations need batch mode there.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_on_url(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run_migrations)
    finally:
        await engine.dispose()


def main() -> None:
    connection = context.config.attributes.get("connection")
    url = context.config.get_main_option("sqlalchemy.url")
    if connection is not None:
        run_migrations(connection)
    elif not url:
        raise InvalidDatabaseUrlError(
            "plaita's Alembic environment got neither a connection nor a database URL; build "
            "its config with plaita.adapters.sqlalchemy.migrations.alembic_config(url=…)"
        )
    elif context.is_offline_mode():
        # `--sql`: print the DDL for a DBA instead of running it.
        context.configure(
            url=url, target_metadata=metadata, version_table=VERSION_TABLE, literal_binds=True
        )
        with context.begin_transaction():
            context.run_migrations()
    else:
        asyncio.run(run_on_url(url))


main()
