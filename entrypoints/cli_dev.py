"""`plaita dev` (C4): the whole system in one process, for a laptop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from plaita.entrypoints.cli_support import (
    cluster_flag,
    named_errors,
    redis_cluster_option,
    redis_partitions_option,
    stop_on_signals,
)


@click.command("dev")
@click.option(
    "--redis-url",
    default=None,
    help="Use this Redis instead of the in-memory twin (state then survives restarts).",
)
@redis_cluster_option
@redis_partitions_option
@click.option(
    "--flows",
    "flows_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Register every *.json flow of this folder (default: examples/flows when present).",
)
@click.option(
    "--handler-modules",
    default="examples.handlers",
    show_default=True,
    help="Comma-separated modules the flows' handlers may come from.",
)
@click.option(
    "--db",
    "database_url",
    default=None,
    help="Keep state and flow definitions in this database (sqlite:///plaita.db, "
    "postgresql://…): executions survive restarts; the queue stays in memory.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True)
def dev(
    redis_url: str | None,
    flows_dir: Path | None,
    handler_modules: str,
    database_url: str | None,
    host: str,
    port: int,
) -> None:
    """Worker, event filter, timers and console in one process; prints the console URL."""
    from plaita.entrypoints.dev import dev_settings, run_dev

    if flows_dir is None and Path("examples/flows").is_dir():
        flows_dir = Path("examples/flows")
    modules = [m.strip() for m in handler_modules.split(",") if m.strip()]
    settings = dev_settings(
        redis_url=redis_url,
        handler_modules=modules,
        database_url=database_url,
        redis_cluster=bool(cluster_flag().get("redis_cluster")),
        partitions=cluster_flag().get("partitions"),
    )

    async def go() -> None:
        stop = asyncio.Event()
        with stop_on_signals(stop):
            await run_dev(
                settings=settings,
                flows_dir=flows_dir,
                host=host,
                port=port,
                echo=lambda line: click.echo(line, err=False),
                stop=stop,
            )

    with named_errors(redis_url):
        try:
            asyncio.run(go())
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve the console on {host}:{port}: {exc}; choose another --port"
            ) from None
