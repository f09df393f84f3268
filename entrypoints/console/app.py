"""The console: the HTTP API (C1) with its auth (C3), /metrics (C5) and the web page (C2).

``create_app`` builds the ASGI app around a container; whoever built the container owns it
(and closes its connections). The page is served from ``static/``: ``/`` is its
``index.html`` and ``/static/*`` the rest, without a token — the page asks for one.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from plaita.application.ports import ConsoleMetrics
from plaita.domain.errors import InvalidConfigurationError
from plaita.entrypoints.console import (
    routes_events,
    routes_executions,
    routes_hooks,
    routes_ops,
    routes_schedules,
    routes_tenants,
)
from plaita.entrypoints.console.auth import (
    ConsoleToken,
    ConsoleTokensError,
    TokenTable,
    as_token_table,
)
from plaita.entrypoints.console.context import Console
from plaita.entrypoints.console.errors import (
    BodyLimits,
    error_response,
    install_error_handlers,
    single_query_values,
)
from plaita.entrypoints.container import Container

DEFAULT_MAX_BODY_BYTES = 1_048_576
#: Resolved through the editable install's links, so files added later are served too.
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: Where /docs loads Swagger UI's scripts and styles from (``fastapi-offline``'s files).
DOCS_ASSETS = "/docs-assets"

_DESCRIPTION = """\
The plaita console API. Every request under `/api/v1` and `/metrics` needs
`Authorization: Bearer <token>` and acts for one tenant: the `tenant` query parameter (GET,
DELETE) or body field (POST), `default` when absent. Errors answer
`{"error": "<NamedError>", "message": "...", "field_errors": [...]}`.
"""


def create_app(
    container: Container,
    *,
    tokens: TokenTable | Iterable[ConsoleToken | Mapping[str, Any]],
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    dev_mode: bool = False,
    static_dir: Path | None = None,
) -> FastAPI:
    """The console app. ``dev_mode`` lets requests without a token act as an admin of every
    tenant (the local ``plaita dev`` only, C3); a wrong token is refused there as well."""
    table = as_token_table(tokens)
    if len(table) == 0 and not dev_mode:
        raise ConsoleTokensError(
            "the console has no tokens, so nobody could use it: set PLAITA_CONSOLE_TOKENS or "
            "pass --tokens-file with a JSON list such as "
            '[{"token": "<secret>", "name": "ops", "role": "admin", "tenants": ["*"]}]'
        )
    if (
        isinstance(max_body_bytes, bool)
        or not isinstance(max_body_bytes, int)
        or max_body_bytes < 1
    ):
        raise InvalidConfigurationError(
            f"max_body_bytes must be a positive number of bytes, got {max_body_bytes!r}; "
            f"the default is {DEFAULT_MAX_BODY_BYTES} (1 MiB)"
        )
    # /docs loads Swagger UI from the installed fastapi-offline package (DOCS_ASSETS), never
    # from a CDN: a console without internet access still shows its API.
    app = FastAPIOffline(
        title="plaita console",
        version=_version(),
        description=_DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
        static_url=DOCS_ASSETS,
        openapi_url="/openapi.json",
        dependencies=[Depends(single_query_values)],
    )
    metrics = container.console_metrics()
    app.state.tokens = table
    app.state.dev_mode = dev_mode
    app.state.console = Console(
        container=container,
        tokens=table,
        metrics=metrics,
        max_body_bytes=max_body_bytes,
        dev_mode=dev_mode,
    )
    install_error_handlers(app)
    app.include_router(routes_ops.health)
    app.include_router(routes_ops.ops)
    app.include_router(routes_executions.router)
    app.include_router(routes_events.router)
    app.include_router(routes_ops.flows)
    app.include_router(routes_schedules.router)
    app.include_router(routes_tenants.router)
    # The hooks file is read and checked now: a console never serves with one it cannot use.
    container.hook_catalog()
    app.include_router(routes_hooks.receiver)
    app.include_router(routes_hooks.admin)
    _serve_page(app, static_dir or STATIC_DIR)
    app.add_middleware(BodyLimits, max_bytes=max_body_bytes)
    app.add_middleware(RequestCounter, metrics=metrics)
    return app


def _serve_page(app: FastAPI, static_dir: Path) -> None:
    index = static_dir / "index.html"

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        if not index.is_file():
            return error_response(
                404,
                "PageNotInstalledError",
                f"the console page is not installed ({index} is missing); the API works: see /docs",
            )
        return FileResponse(index, media_type="text/html")

    app.mount("/static", StaticFiles(directory=static_dir, check_dir=False), name="static")


class RequestCounter:
    """Counts answered requests by method, route template and status (C5)."""

    def __init__(self, app: ASGIApp, *, metrics: ConsoleMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            # Templates only (never raw paths): ids must not become label values.
            template = getattr(scope.get("route"), "path", None)
            if template is None:
                path = str(scope.get("path", ""))
                mount = next(
                    (m for m in ("/static", DOCS_ASSETS) if path.startswith(f"{m}/")), None
                )
                template = "unmatched" if mount is None else f"{mount}/{{path}}"
            self.metrics.answered(scope["method"], str(template), status)


def _version() -> str:
    try:
        return importlib.metadata.version("plaita")
    except importlib.metadata.PackageNotFoundError:
        return "0"
