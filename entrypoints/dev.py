"""`plaita dev`: worker, event filter, timers and console in one process (C4, C9).

For a laptop: the memory twin by default (nothing to install, nothing kept), or a real Redis
with ``--redis-url``. The flows of ``examples/flows`` (or ``--flows DIR``) are registered
deployment-wide with their handler modules, one admin token for every tenant is created and
printed with the console's URL, and everything stops on SIGINT/SIGTERM: the console first (no
new requests), then the worker drains its dispatches (W17) and the event filter finishes its
notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from plaita.domain.errors import FlowVersionConflictError
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli_catalog import SHARED_ROLLBACK, latest_note
from plaita.entrypoints.cli_support import (
    import_handler_modules,
    load_flow_file,
    log_generations,
    warn_fallbacks,
)
from plaita.entrypoints.container import Container, build_container, upgrade_schema
from plaita.entrypoints.sdk.client import Client
from plaita.entrypoints.sdk.worker import Worker
from plaita.entrypoints.settings import Settings, optional_fallbacks

log = logging.getLogger("plaita.dev")

DEFAULT_PORT = 8700
#: Short blocking reads: a dev process should feel instant and stop at once.
DEV_READ_BLOCK_MS = 100


def dev_token() -> dict[str, Any]:
    """The one token of a dev process: admin, every tenant, new on every start."""
    return {"token": secrets.token_urlsafe(24), "name": "dev", "role": "admin", "tenants": ["*"]}


async def run_dev(
    *,
    settings: Settings,
    flows_dir: Path | None,
    host: str,
    port: int,
    echo: Callable[[str], None],
    stop: asyncio.Event,
    token: dict[str, Any] | None = None,
) -> None:
    """Run every service of a deployment in this process until ``stop`` is set."""
    container = build_container(settings)
    try:
        if settings.backend == "redis":
            await container.redis_client().ping()
        import_handler_modules(settings.handler_modules)
        log_generations(log, "dev", container.generations())
        if settings.storage == "sql" and settings.database_url:
            await _migrate(settings.database_url, echo)
        registered = await register_flow_folder(container, flows_dir, echo)
        token = token or dev_token()
        app = container.console(
            tokens=[token], dev_mode=True, max_body_bytes=settings.max_body_bytes
        )
        server = _ConsoleServer(
            uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        )
        # Bound first, so a port in use is an OSError naming it (not uvicorn's sys.exit) and
        # no service has started yet.
        listening = socket.create_server((host, port))
        port = int(listening.getsockname()[1])  # the one chosen when --port 0
        # plaita.Worker as application code embeds it: worker, event filter, timers.
        worker = Worker(Client._on(container, settings), handler_modules=settings.handler_modules)
        await worker.start()
        try:
            console = asyncio.create_task(server.serve(sockets=[listening]))
            await _wait_started(server, console)
            echo(_banner(settings, registered, host, port, token["token"]))
            recovered = worker.recovered
            if recovered is not None:
                echo(
                    f"  kept:    {recovered.continued} running executions continued, "
                    f"{recovered.timers} timers and {recovered.subscriptions} event waits "
                    "restored"
                )
            await stop.wait()
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await console
        finally:
            await worker.stop()
    finally:
        if settings.backend == "redis":
            await container.redis_client().aclose()
        if settings.storage == "sql":
            await container.sql_engine().dispose()


async def _migrate(database_url: str, echo: Callable[[str], None]) -> None:
    """A dev database is created or upgraded on start: nothing to run by hand."""
    revision = await upgrade_schema(database_url)
    echo(f"plaita dev: database {database_url} at schema {revision}")


class _ConsoleServer(uvicorn.Server):
    """uvicorn without its own signal handling: SIGINT/SIGTERM belong to the dev process,
    which stops the console first and then lets the worker drain."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


async def register_flow_folder(
    container: Container, flows_dir: Path | None, echo: Callable[[str], None]
) -> list[str]:
    """Register the folder's flows deployment-wide, so every tenant of the dev process can
    run them. A file edited under a version a kept store (``--redis-url``, ``--db``) already
    holds is refused — a version never changes — and the stored one stays in use."""
    if flows_dir is None:
        return []
    names = []
    for path in sorted(flows_dir.glob("*.json")):
        try:
            registered = await container.flows().register(load_flow_file(path), owner=SHARED)
        except FlowVersionConflictError as exc:
            echo(f"plaita dev: {path}: {type(exc).__name__}: {exc}")
            continue
        name = f"{registered.flow.flow_id} v{registered.flow.version}"
        if not registered.is_latest:
            echo(f"plaita dev: {path}: {name}: {latest_note(registered, how=SHARED_ROLLBACK)}")
            name += f" (latest v{registered.latest.latest})"
        names.append(name)
    return names


async def _wait_started(server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
    """Until the console listens; a port already in use ends the task, which is re-raised."""
    async with asyncio.timeout(10):
        while not server.started:
            if serving.done():
                serving.result()
                raise OSError("the console stopped while starting")
            await asyncio.sleep(0.02)


def _banner(settings: Settings, registered: Sequence[str], host: str, port: int, token: str) -> str:
    store = (
        "the in-memory twin (nothing is kept)"
        if settings.backend == "memory"
        else (f"Redis at {settings.redis_url}")
    )
    flows = ", ".join(registered) if registered else "none (register some with the API)"
    return "\n".join(
        [
            f"plaita dev: worker, event filter, timers and console on {store}",
            f"  flows:   {flows}",
            f"  console: http://{host}:{port}/",
            f"  token:   {token}   (admin, every tenant; new on every start)",
            "  stop:    Ctrl-C",
        ]
    )


def dev_settings(
    *,
    redis_url: str | None,
    handler_modules: Sequence[str],
    database_url: str | None = None,
    redis_cluster: bool = False,
    partitions: int | None = None,
) -> Settings:
    """The settings of a dev process: memory unless a Redis URL is given; fast reads; state
    and definitions in a database with ``database_url`` (S4)."""
    values: dict[str, Any] = {
        "backend": "redis" if redis_url else "memory",
        "handler_modules": tuple(handler_modules),
        "read_block_ms": DEV_READ_BLOCK_MS,
        "concurrency": 8,
    }
    if redis_url:
        values["redis_url"] = redis_url
    if redis_cluster:
        values["redis_cluster"] = True
    if partitions is not None:
        values["partitions"] = partitions
    if database_url:
        values["storage"] = "sql"
        values["database_url"] = database_url
    given, warnings = optional_fallbacks(values)
    warn_fallbacks(warnings)
    return Settings(**given)
