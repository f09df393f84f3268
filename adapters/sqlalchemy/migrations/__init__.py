"""The SQL storage's schema, managed by Alembic (S4): what ``plaita db upgrade`` runs.

The Alembic environment (``env.py``), the script template and ``versions/`` ship inside the
package; the configuration is built here, so no ``alembic.ini`` is needed at run time. A
developer adds a revision with::

    from alembic import command
    from plaita.adapters.sqlalchemy.migrations import alembic_config
    command.revision(alembic_config(url="sqlite:///dev.db"), "what changed", autogenerate=True)

(against a database already at head), then checks the generated file by hand.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from plaita.adapters.sqlalchemy.engine import create_engine, transaction, writer
from plaita.domain.errors import DatabaseSchemaError

#: plaita's own version table, so a database shared with another Alembic project works.
VERSION_TABLE = "plaita_alembic_version"
SCRIPT_LOCATION = Path(__file__).resolve().parent
#: PostgreSQL advisory lock held while migrating: two processes starting at once (two
#: workers, or a worker and `plaita db upgrade`) migrate one after the other.
_MIGRATION_LOCK = 0x706C61697461  # "plaita"


def alembic_config(*, connection: Connection | None = None, url: str | None = None) -> Config:
    """Alembic's configuration for plaita's migrations, on ``connection`` or ``url``."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


async def upgrade(url: str, revision: str = "head") -> str:
    """Migrate the database at ``url`` up to ``revision``; the revision it is at after.

    Safe to run again: a database already there is left as it is. DatabaseSchemaError when
    ``revision`` is not one of plaita's, or the database is at a revision this plaita does
    not know (a newer plaita migrated it).
    """
    engine = create_engine(url)
    try:
        async with transaction(writer(engine)) as connection:
            return await connection.run_sync(_upgrade, revision)
    finally:
        await engine.dispose()


async def current(url: str) -> str | None:
    """The revision the database at ``url`` is at; None before the first upgrade."""
    engine = create_engine(url)
    try:
        async with transaction(engine) as connection:
            return await connection.run_sync(_current)
    finally:
        await engine.dispose()


def head() -> str:
    """The newest revision this plaita knows."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if revision is None:
        raise DatabaseSchemaError(f"no migrations under {SCRIPT_LOCATION}; the package is broken")
    return revision


def _upgrade(connection: Connection, revision: str) -> str:
    if connection.dialect.name == "postgresql":
        connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
    config = alembic_config(connection=connection)
    try:
        command.upgrade(config, revision)
    except CommandError as exc:
        raise DatabaseSchemaError(
            f"cannot migrate the schema to {revision!r}: {exc}. plaita's revisions end at "
            f"{head()!r}; pass 'head', or upgrade plaita if a newer one migrated this database"
        ) from None
    reached = _current(connection)
    if reached is None:
        raise DatabaseSchemaError(
            f"migrating to {revision!r} left the schema at no revision; pass 'head' or one of "
            "plaita's revisions"
        )
    return reached


def _current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()
