"""``plaita console``: the HTTP API and web page against Redis (C1, C2, C3).

Serves with uvicorn until SIGTERM/SIGINT, then stops taking connections, lets the requests in
flight finish (bounded) and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click
import uvicorn

from plaita.entrypoints.cli_support import (
    flow_cache_size_option,
    flow_cache_ttl_option,
    log_generations,
    named_errors,
    service_redis_url_option,
    settings_from,
    stop_on_signals,
)
from plaita.entrypoints.console.auth import ConsoleTokensError, TokenTable
from plaita.entrypoints.settings import Settings

if TYPE_CHECKING:  # the web application and the container load when the console starts
    from fastapi import FastAPI

    from plaita.entrypoints.container import Container

log = logging.getLogger("plaita.console")

#: How long requests in flight may take to finish after a stop signal.
GRACEFUL_SHUTDOWN_SECONDS = 10


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: plaita's handlers stop it, and a stop asked for
    by SIGTERM is a clean exit (uvicorn would re-raise the signal and exit -15)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def load_tokens(settings: Settings, tokens_file: Path | None) -> TokenTable:
    if tokens_file is not None:
        return TokenTable.from_file(tokens_file)
    if settings.console_tokens:
        return TokenTable.from_json(settings.console_tokens, source="PLAITA_CONSOLE_TOKENS")
    raise ConsoleTokensError(
        "the console has no tokens, so nobody could use it: pass --tokens-file FILE or set "
        "PLAITA_CONSOLE_TOKENS to a JSON list such as "
        '[{"token": "<secret>", "name": "ops", "role": "admin", "tenants": ["*"]}]'
    )


@click.command("console")
@service_redis_url_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8700, show_default=True, help="0: any."
)
@click.option(
    "--tokens-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="PLAITA_CONSOLE_TOKENS_FILE",
    default=None,
    help="JSON list of tokens ({token, name, role, tenants}); default: PLAITA_CONSOLE_TOKENS.",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(1),
    envvar="PLAITA_MAX_BODY_BYTES",
    default=1_048_576,
    show_default=True,
    help="Larger request bodies are refused with 413.",
)
@click.option(
    "--handler-modules",
    envvar="PLAITA_HANDLER_MODULES",
    default=None,
    help="The workers' handler allowlist; flows registered through the console must keep "
    "to it (POST /api/v1/flows).",
)
@click.option(
    "--queue-name",
    envvar="PLAITA_QUEUE_NAME",
    default=None,
    help="The workers' queue, for queue and DLQ figures (default 'default').",
)
@click.option(
    "--hooks-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="PLAITA_HOOKS_FILE",
    default=None,
    help="Inbound webhooks (POST /hooks/NAME) defined in a JSON or TOML file, checked at start.",
)
@flow_cache_size_option
@flow_cache_ttl_option
def console(
    redis_url: str,
    host: str,
    port: int,
    tokens_file: Path | None,
    max_body_bytes: int,
    handler_modules: str | None,
    queue_name: str | None,
    hooks_file: Path | None,
    flow_cache_size: str | None,
    flow_cache_ttl_seconds: str | None,
) -> None:
    """Serve the console's HTTP API (/api/v1, /docs) and web page until SIGTERM/SIGINT."""
    settings = settings_from(
        backend="redis",
        redis_url=redis_url,
        handler_modules=handler_modules,
        # The allowlist is only compared with the flows' handler names: the console never
        # imports or runs handler code (``HandlerAllowlist``, not ``HandlerRegistry``).
        handler_check="names",
        queue_name=queue_name,
        max_body_bytes=max_body_bytes,
        hooks_file=None if hooks_file is None else str(hooks_file),
        flow_cache_size=flow_cache_size,
        flow_cache_ttl_seconds=flow_cache_ttl_seconds,
    )
    with named_errors(settings.redis_url):
        tokens = load_tokens(settings, tokens_file)
        asyncio.run(_serve(settings, tokens, host, port))


def console_app(container: Container, settings: Settings, tokens: TokenTable) -> FastAPI:
    """The console's ASGI app as ``plaita console`` serves it, from ``settings``."""
    app: FastAPI = container.console(tokens=tokens, max_body_bytes=settings.max_body_bytes)
    return app


async def _serve(settings: Settings, tokens: TokenTable, host: str, port: int) -> None:
    from plaita.entrypoints.container import build_container

    container = build_container(settings)
    try:
        await container.redis_client().ping()
        log_generations(log, "console", container.generations())
        app = console_app(container, settings, tokens)
        server = _Server(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                lifespan="off",
                log_level="warning",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
            )
        )
        listener = _listen(host, port)
        bound = int(listener.getsockname()[1])
        stop = asyncio.Event()
        with stop_on_signals(stop):
            serving = asyncio.create_task(server.serve(sockets=[listener]))
            while not server.started and not serving.done():
                await asyncio.sleep(0.02)
            if server.started:
                click.echo(
                    f"plaita console listening on http://{host}:{bound} ({len(tokens)} tokens; "
                    "API docs at /docs); stop with SIGTERM or Ctrl-C",
                    err=True,
                )
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not serving.done():
                server.should_exit = True
                await serving
            stopping.cancel()
            serving.result()
            if not stop.is_set():
                raise click.ClickException(
                    f"the console on {host}:{bound} stopped on its own; see the log above"
                )
        log.info("event=console.stopped host=%s port=%d", host, bound)
    finally:
        await container.redis_client().aclose()


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a taken port is a one-line error, not a trace."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port "
            "(0 picks a free one) or --host"
        ) from None
    return sock
