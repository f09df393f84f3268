"""`plaita dev` (C4): a project's dev server — the whole system in one process, for a laptop.

Run from a project's directory: it registers the flow files of ``./flows`` (``--flows``),
trusts the handler modules they name (``--handler-modules``), reloads the files as they
change, serves the console without a token on loopback, and answers the CLI commands run in
the same directory (ADR 0021; ``entrypoints/dev.py`` says each in full).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from plaita.domain.errors import DevTokenRequiredError
from plaita.entrypoints.cli_support import (
    REDIS_URL,
    cluster_flag,
    named_errors,
    redis_cluster_option,
    redis_partitions_option,
    stop_on_signals,
)
from plaita.entrypoints.console.auth import MIN_TOKEN_LENGTH


@click.command("dev")
@click.option(
    "--flows",
    "flows_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The folder of flow files (*.json) to register and reload as they change "
    "[default: ./flows].",
)
@click.option(
    "--handler-modules",
    envvar="PLAITA_HANDLER_MODULES",
    default=None,
    help="Comma-separated modules task handlers may come from (env PLAITA_HANDLER_MODULES) "
    "[default: the modules the flow files' task handlers name, imported from the current "
    "directory].",
)
@click.option(
    "--redis-url",
    type=REDIS_URL,
    default=None,
    help="Use this Redis instead of the in-memory twin (state then survives restarts).",
)
@redis_cluster_option
@redis_partitions_option
@click.option(
    "--db",
    "database_url",
    default=None,
    help="Keep state and flow definitions in this database (sqlite:///plaita.db, "
    "postgresql://…): executions survive restarts; the queue stays in memory.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Where the console listens. A loopback address needs no token; any other needs --token.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True)
@click.option(
    "--token",
    envvar="PLAITA_DEV_TOKEN",
    default=None,
    help="An admin token of every tenant (at least 16 characters; env PLAITA_DEV_TOKEN). "
    "Required with a --host beyond loopback, where every request must send it.",
)
@click.option(
    "--no-reload",
    "no_reload",
    is_flag=True,
    help="Register the flow files once at start; do not watch them.",
)
def dev(
    flows_dir: Path | None,
    handler_modules: str | None,
    redis_url: str | None,
    database_url: str | None,
    host: str,
    port: int,
    token: str | None,
    no_reload: bool,
) -> None:
    """Worker, event filter, timers and console in one process, on this project's flows."""
    from plaita.entrypoints.dev import (
        DEFAULT_FLOWS_DIR,
        DevOptions,
        dev_settings,
        handler_modules_named,
        resolve_access,
        run_dev,
    )

    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise click.BadParameter(
            f"a token needs at least {MIN_TOKEN_LENGTH} characters (got {len(token)})",
            param_hint="--token",
        )
    try:
        access = resolve_access(host, token)
    except DevTokenRequiredError as exc:
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from None
    folder = flows_dir if flows_dir is not None else DEFAULT_FLOWS_DIR
    if handler_modules is None:
        modules = sorted(handler_modules_named(folder))
    else:
        modules = [m.strip() for m in handler_modules.split(",") if m.strip()]
    settings = dev_settings(
        redis_url=redis_url,
        handler_modules=modules,
        database_url=database_url,
        redis_cluster=bool(cluster_flag().get("redis_cluster")),
        partitions=cluster_flag().get("partitions"),
    )
    options = DevOptions(
        flows_dir=folder,
        host=host,
        port=port,
        token=token,
        reload=not no_reload,
    )

    async def go() -> None:
        stop = asyncio.Event()
        with stop_on_signals(stop):
            await run_dev(
                settings=settings, options=options, echo=click.echo, stop=stop, access=access
            )

    with named_errors(redis_url):
        asyncio.run(go())
