"""`plaita db`: the SQL storage's schema, managed by Alembic migrations (S4)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator

import click

from plaita.entrypoints.cli_support import echo_json, json_option, named_errors

database_url_option = click.option(
    "--database-url",
    envvar="PLAITA_DATABASE_URL",
    required=True,
    help="sqlite:///plaita.db or postgresql://user@host:5432/plaita (env PLAITA_DATABASE_URL).",
)


def _masked(url: str) -> str:
    """The URL without its password: it goes into an error message."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


@contextlib.contextmanager
def database_errors(database_url: str) -> Iterator[None]:
    """Named errors as usual; an unreachable database names the URL (password masked)."""
    from sqlalchemy.exc import OperationalError

    with named_errors():
        try:
            yield
        except (OperationalError, OSError) as exc:
            raise click.ClickException(
                f"cannot reach the database at {_masked(database_url)}: "
                f"{getattr(exc, 'orig', None) or exc}. Is it running, and is the URL right "
                "(--database-url / PLAITA_DATABASE_URL)?"
            ) from None


@click.group("db")
def db() -> None:
    """Create and upgrade the SQL storage's schema."""


@db.command("upgrade")
@database_url_option
@click.option("--revision", default="head", show_default=True, help="Migrate up to this one.")
@json_option
def db_upgrade(database_url: str, revision: str, as_json: bool) -> None:
    """Create the schema, or migrate it up to REVISION (safe to run again)."""
    with database_errors(database_url):
        from plaita.entrypoints.container import schema_revision, upgrade_schema

        before = asyncio.run(schema_revision(database_url))
        after = asyncio.run(upgrade_schema(database_url, revision))
    if as_json:
        echo_json({"from": before, "to": after})
    elif before == after:
        click.echo(f"the schema is already at {after}")
    else:
        click.echo(f"migrated the schema from {before or 'nothing'} to {after}")


@db.command("current")
@database_url_option
@json_option
def db_current(database_url: str, as_json: bool) -> None:
    """Print the schema's migration revision (none before the first upgrade)."""
    with database_errors(database_url):
        from plaita.entrypoints.container import schema_revision

        revision = asyncio.run(schema_revision(database_url))
    if as_json:
        echo_json({"revision": revision})
    else:
        click.echo(revision or "none: run `plaita db upgrade`")
