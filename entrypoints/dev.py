"""`plaita dev`: a project's dev server — worker, event filter, timers, the scheduler and
console in one process, its flow files registered and reloaded, its CLI reachable (C4, C9,
W22; ADR 0021).

For a laptop, run from a project's directory: the memory twin by default (nothing to
install, nothing kept), a real Redis with ``--redis-url``, or state in a database with
``--db``.

- **Flows**: every ``*.json`` of ``--flows DIR`` (default ``./flows``) is registered
  deployment-wide, and the folder is read again every ``RELOAD_INTERVAL_SECONDS``: a new file
  or a new version registers and becomes the flow's latest; a file edited under a version
  already registered is refused by name (a version never changes: bump it) and the stored
  definition stays in use; a broken file is named and read again when it changes.
- **Handlers**: ``--handler-modules`` defaults to the modules the task handlers of the flow
  files name (``"module:function"``) when it starts, imported with the current directory
  first on ``sys.path`` (``flows/handlers.py`` is ``flows.handlers``, ``app/tasks.py`` is
  ``app.tasks``). They are the worker's allowlist until it stops: a flow that names another
  module later is refused until a restart (handler code is not reloaded either).
- **Access**: bound to loopback (the default ``127.0.0.1``) the console and its API need no
  token — every request acts as an admin of every tenant; any other ``--host`` needs
  ``--token`` and every request must carry it (``domain/dev_access.py``).
- **The CLI**: the control socket ``.plaita/dev.sock`` (``dev_control.py``) lets every
  operator command run in this directory act on this process.

Everything stops on SIGINT/SIGTERM: the scheduler (after its tick) and the console first (no
new starts, no new requests), the control socket and the flow reloads, then the worker
drains its dispatches (W17) and the event filter finishes its notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import uvicorn

from plaita.domain.dev_access import DevAccess, dev_access
from plaita.domain.errors import (
    FlowVersionConflictError,
    HandlerNotAllowedError,
    InvalidConfigurationError,
    PlaitaError,
    UnknownHandlerError,
)
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli_catalog import SHARED_ROLLBACK, latest_note
from plaita.entrypoints.cli_support import (
    import_handler_modules,
    log_generations,
    warn_fallbacks,
)
from plaita.entrypoints.container import Container, build_container, upgrade_schema
from plaita.entrypoints.dev_control import SOCKET_PATH, ControlServer
from plaita.entrypoints.sdk.client import Client
from plaita.entrypoints.sdk.worker import Worker
from plaita.entrypoints.settings import Settings, optional_fallbacks

log = logging.getLogger("plaita.dev")

DEFAULT_PORT = 8700
#: Where the flow files are when ``--flows`` is not given, relative to the current directory.
DEFAULT_FLOWS_DIR = Path("flows")
#: Short blocking reads: a dev process should feel instant and stop at once.
DEV_READ_BLOCK_MS = 100
#: A definition registered by another catalog (``plaita flows register`` through the control
#: socket) is what new executions run within this; the dev's own registrations at once.
DEV_FLOW_CACHE_TTL_SECONDS = 1.0
#: How often the flow folder is read again; an edit is registered within about this long.
RELOAD_INTERVAL_SECONDS = 1.0

Echo = Callable[[str], None]


def page_token() -> dict[str, Any]:
    """The token the console's page signs in with on loopback: admin, every tenant, new on
    every start (the API and the CLI need none there)."""
    return {"token": secrets.token_urlsafe(24), "name": "dev", "role": "admin", "tenants": ["*"]}


def resolve_access(host: str, token: str | None) -> DevAccess:
    """Who may use the console bound to ``host`` (``DevTokenRequiredError`` when a token is
    required and none was given), from the addresses ``host`` resolves to."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        infos = []
    return dev_access(host, [str(info[4][0]) for info in infos], token)


# --- handler modules ----------------------------------------------------------------------


def handler_modules_named(flows_dir: Path) -> dict[str, list[str]]:
    """The modules the task handlers of ``flows_dir``'s flow files name, each with the files
    that name it; a file that does not parse names none (its registration reports it)."""
    named: dict[str, list[str]] = {}
    for path in flow_files(flows_dir):
        try:
            flow = Flow.from_json(path.read_bytes())
        except (OSError, PlaitaError):
            continue
        for module in sorted(flow.handler_modules()):
            named.setdefault(module, []).append(path.name)
    return named


def import_dev_handlers(modules: Sequence[str], named_by: Mapping[str, list[str]]) -> None:
    """Import the allowlist from the current directory (or the installed packages) now, to
    fail before anything runs; the error names the flow files that named a missing module."""
    for module in modules:
        try:
            import_handler_modules((module,))
        except UnknownHandlerError as exc:
            files = named_by.get(module)
            if not files:
                raise
            raise UnknownHandlerError(
                f"{exc}. The flow files {', '.join(files)} name it: run plaita dev from the "
                "directory the module is importable from (the project's root), or pass "
                "--handler-modules"
            ) from None


# --- the flow folder ----------------------------------------------------------------------


def flow_files(folder: Path) -> list[Path]:
    return (
        sorted(path for path in folder.glob("*.json") if path.is_file()) if folder.is_dir() else []
    )


@attrs.frozen
class Scan:
    """What one read of the flow folder registered (``"pay v2"``), and how many files it has."""

    registered: tuple[str, ...]
    files: int


class FlowFolder:
    """The flow files of one folder, registered deployment-wide — every tenant of the dev
    process runs them — first all of them, then each one that appears or changes.

    A file is compared by its bytes (a save that changes nothing registers nothing; an edit
    within one second of the last is still seen), and each outcome is said once per content:
    a broken file is named once, not on every read.
    """

    def __init__(self, container: Container, path: Path, echo: Echo) -> None:
        self.path = path
        self._container = container
        self._echo = echo
        self._digests: dict[Path, bytes] = {}
        #: The flow version each file last registered (or found registered).
        self._registered: dict[Path, str] = {}
        self._scans = 0

    async def scan(self) -> Scan:
        """Register what is new or changed since the last scan; the first scan says only
        what it refused (the banner lists what it registered)."""
        first = self._scans == 0
        self._scans += 1
        registered: list[str] = []
        current = flow_files(self.path)
        for path in current:
            try:
                data = path.read_bytes()
            except OSError as exc:
                self._once(path, b"unreadable", f"cannot be read ({exc.strerror or exc})")
                continue
            digest = hashlib.sha256(data).digest()
            if self._digests.get(path) == digest:
                continue
            self._digests[path] = digest
            name = await self._register(path, data, quiet=first)
            if name is not None:
                registered.append(name)
        for gone in sorted(set(self._digests) - set(current)):
            del self._digests[gone]
            kept = self._registered.pop(gone, None)
            what = f"; {kept} stays registered (a version never changes)" if kept else ""
            self._echo(f"plaita dev: {gone} was removed{what}")
        return Scan(tuple(registered), len(current))

    async def watch(
        self, stop: asyncio.Event, *, interval_s: float = RELOAD_INTERVAL_SECONDS
    ) -> None:
        """Scan every ``interval_s`` until ``stop`` is set; a failed scan is logged and the
        next one runs (the dev process never stops over a flow file)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await stop.wait()
            if stop.is_set():
                return
            try:
                await self.scan()
            except Exception as exc:  # a store outage, say: said, and read again next time
                log.warning("event=dev.flow_scan_failed folder=%s error=%r", self.path, exc)

    async def _register(self, path: Path, data: bytes, *, quiet: bool) -> str | None:
        try:
            flow = Flow.from_json(data)
            registration = await self._container.flows().register(flow, owner=SHARED)
        except FlowVersionConflictError as exc:
            self._echo(
                f"plaita dev: {path}: {type(exc).__name__}: {exc}. The stored definition stays "
                f'in use: bump "version" in {path.name} to register the edit'
            )
            return None
        except HandlerNotAllowedError as exc:
            self._echo(
                f"plaita dev: {path}: {type(exc).__name__}: {exc} (plaita dev's handler "
                "modules are fixed when it starts: restart it to allow another one)"
            )
            return None
        except PlaitaError as exc:
            self._echo(
                f"plaita dev: {path}: {type(exc).__name__}: {exc}; fix the file, it is read "
                "again when it changes"
            )
            return None
        flow = registration.flow
        name = f"{flow.flow_id} v{flow.version}"
        self._registered[path] = name
        if quiet:
            return name
        if registration.created and not registration.is_latest:
            self._echo(
                f"plaita dev: {path}: registered {name} (deployment-wide): "
                f"{latest_note(registration, how=SHARED_ROLLBACK)}"
            )
            return name
        if registration.created:
            self._echo(
                f"plaita dev: {path}: registered {name} (deployment-wide), now the latest "
                f"version of {flow.flow_id}: new executions of it run this definition"
            )
            return name
        self._echo(f"plaita dev: {path}: {name} is registered with this document already")
        return None

    def _once(self, path: Path, digest: bytes, problem: str) -> None:
        if self._digests.get(path) != digest:
            self._digests[path] = digest
            self._echo(f"plaita dev: {path} {problem}; it is read again when it changes")


# --- the process --------------------------------------------------------------------------


@attrs.frozen
class DevOptions:
    """What ``plaita dev`` was asked for, beside its settings."""

    flows_dir: Path = DEFAULT_FLOWS_DIR
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    reload: bool = True
    control_socket: Path | None = SOCKET_PATH


async def run_dev(
    *,
    settings: Settings,
    options: DevOptions,
    echo: Echo,
    stop: asyncio.Event,
    access: DevAccess | None = None,
) -> None:
    """Run every service of a deployment in this process until ``stop`` is set."""
    access = access or resolve_access(options.host, options.token)
    container = build_container(settings)
    try:
        if settings.backend == "redis":
            await container.redis_client().ping()
        import_dev_handlers(settings.handler_modules, handler_modules_named(options.flows_dir))
        log_generations(log, "dev", container.generations())
        if settings.storage == "sql" and settings.database_url:
            await _migrate(settings.database_url, echo)
        folder = FlowFolder(container, options.flows_dir, echo)
        scan = await folder.scan()
        await _serve(container, settings, options, access, folder, scan, echo, stop)
    finally:
        if settings.backend == "redis":
            await container.redis_client().aclose()
        if settings.storage == "sql":
            await container.sql_engine().dispose()


async def _serve(
    container: Container,
    settings: Settings,
    options: DevOptions,
    access: DevAccess,
    folder: FlowFolder,
    scan: Scan,
    echo: Echo,
    stop: asyncio.Event,
) -> None:
    tokens = [] if options.token is None else [_given_token(options.token)]
    page = page_token() if access.tokenless else None
    app = container.console(
        tokens=tokens + ([page] if page else []),
        dev_mode=access.tokenless,
        max_body_bytes=settings.max_body_bytes,
    )
    server = _ConsoleServer(
        uvicorn.Config(app, host=options.host, port=options.port, log_level="warning")
    )
    # Bound first, so a port in use is a named error (not uvicorn's sys.exit) and no service
    # has started yet.
    listening = _listen(options.host, options.port)
    port = int(listening.getsockname()[1])  # the one chosen when --port 0
    url = f"http://{_url_host(options.host)}:{port}/"
    # Before any service starts: another dev process serving this directory stops this one.
    control = await _open_control(container, options, settings, url, echo)
    try:
        # plaita.Worker as application code embeds it: worker, event filter, timers.
        worker = Worker(Client._on(container, settings), handler_modules=settings.handler_modules)
        await worker.start()
        try:
            console = asyncio.create_task(server.serve(sockets=[listening]))
            watching: asyncio.Task[None] | None = None
            scheduling: asyncio.Task[None] | None = None
            scheduler_stop = asyncio.Event()
            try:
                await _wait_started(server, console)
                echo(
                    banner(
                        settings=settings,
                        options=options,
                        scan=scan,
                        access=access,
                        url=url,
                        page=None if page is None else page["token"],
                        control=None if control is None else control.path,
                    )
                )
                _echo_recovered(worker, echo)
                if options.reload:
                    watching = asyncio.create_task(folder.watch(stop), name="flow-reload")
                # W22: the schedules of this deployment fire from here too.
                scheduling = asyncio.create_task(
                    container.scheduler().run(scheduler_stop), name="scheduler"
                )
                await _until_stopped(stop, console)
            finally:
                scheduler_stop.set()
                if scheduling is not None:
                    await asyncio.gather(scheduling, return_exceptions=True)
                server.should_exit = True
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(console, return_exceptions=True)
                if watching is not None:
                    watching.cancel()
                    await asyncio.gather(watching, return_exceptions=True)
        finally:
            await worker.stop()
    finally:
        if control is not None:
            await control.close()
        listening.close()


async def _until_stopped(stop: asyncio.Event, console: asyncio.Task[None]) -> None:
    """Until ``stop`` is set; a console that stops on its own ends the dev process too."""
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({stopping, console}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not stop.is_set():
        console.result()  # its error, if it failed
        raise InvalidConfigurationError("the console stopped on its own; see the log above")


def _listen(host: str, port: int) -> socket.socket:
    try:
        return socket.create_server((host, port))
    except OSError as exc:
        raise InvalidConfigurationError(
            f"cannot serve the console on {host}:{port}: {exc.strerror or exc}; choose another "
            "--port (0 picks a free one) or --host"
        ) from None


def _echo_recovered(worker: Worker, echo: Echo) -> None:
    recovered = worker.recovered
    if recovered is not None:
        echo(
            f"  kept:     {recovered.continued} running executions continued, "
            f"{recovered.timers} timers and {recovered.subscriptions} event waits restored"
        )


def _given_token(token: str) -> dict[str, Any]:
    return {"token": token, "name": "dev", "role": "admin", "tenants": ["*"]}


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _open_control(
    container: Container, options: DevOptions, settings: Settings, url: str, echo: Echo
) -> ControlServer | None:
    """The control socket, or None (said) when this directory cannot hold one; another dev
    process already serving it stops this one (DevServerRunningError)."""
    if options.control_socket is None:
        return None
    store = "memory" if settings.backend == "memory" else settings.redis_url
    control = ControlServer(
        container,
        path=options.control_socket,
        about={"pid": os.getpid(), "console": url, "store": store},
    )
    try:
        await control.start()
    except OSError as exc:
        echo(
            f"plaita dev: no control socket at {options.control_socket} ({exc.strerror or exc}): "
            "commands reach this process through the console's API only"
        )
        return None
    return control


async def _migrate(database_url: str, echo: Echo) -> None:
    """A dev database is created or upgraded on start: nothing to run by hand."""
    revision = await upgrade_schema(database_url)
    echo(f"plaita dev: database {database_url} at schema {revision}")


class _ConsoleServer(uvicorn.Server):
    """uvicorn without its own signal handling: SIGINT/SIGTERM belong to the dev process,
    which stops the console first and then lets the worker drain."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


async def _wait_started(server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
    """Until the console listens; a port already in use ends the task, which is re-raised."""
    async with asyncio.timeout(10):
        while not server.started:
            if serving.done():
                serving.result()
                raise OSError("the console stopped while starting")
            await asyncio.sleep(0.02)


def banner(
    *,
    settings: Settings,
    options: DevOptions,
    scan: Scan,
    access: DevAccess,
    url: str,
    page: str | None,
    control: Path | None,
) -> str:
    """What the dev process tells its user at start: what runs, where, and how to reach it."""
    if settings.storage == "sql":
        store = f"state in {settings.database_url} (kept), the queue in memory"
    elif settings.backend == "memory":
        store = "the in-memory twin (nothing is kept)"
    else:
        store = f"Redis at {settings.redis_url}"
    rows = [
        ("flows", _flows_line(options, scan)),
        ("handlers", _handlers_line(settings, options)),
        ("console", f"{url}   (API docs at {url}docs)"),
        ("access", _access_line(access)),
    ]
    if page is not None:
        rows.append(("page", f"sign in with {page}   (admin, every tenant; new on every start)"))
    if control is not None:
        rows.append(
            (
                "cli",
                f"commands run in this directory act on this process ({control}), e.g. "
                "plaita executions start FLOW --input '{}'",
            )
        )
    rows += [
        ("worker", f"{settings.consumer_name} (on the Workers page)"),
        ("stop", "Ctrl-C"),
    ]
    width = max(len(label) for label, _ in rows) + 1
    lines = [f"plaita dev: worker, event filter, timers, scheduler and console on {store}"]
    lines += [f"  {label + ':':<{width}} {value}" for label, value in rows]
    return "\n".join(lines)


def _flows_line(options: DevOptions, scan: Scan) -> str:
    folder = options.flows_dir
    reload = "; read again every second" if options.reload else ""
    if not folder.is_dir():
        return (
            f"none: no folder {folder}/ in {Path.cwd()} (put flow files there{reload}, pass "
            "--flows DIR, or register with `plaita flows register FILE`)"
        )
    if scan.files == 0:
        return f"none yet: {folder}/ has no *.json flow files{reload}"
    registered = ", ".join(scan.registered) if scan.registered else "none registered"
    return f"{registered}   (from {folder}/{reload})"


def _handlers_line(settings: Settings, options: DevOptions) -> str:
    modules = ", ".join(settings.handler_modules)
    if not modules:
        return (
            "none: the flows name no task handler (pass --handler-modules M1,M2 to allow "
            "some for flows registered later)"
        )
    return f"{modules}   (fixed until plaita dev restarts)"


def _access_line(access: DevAccess) -> str:
    if access.tokenless:
        return (
            f"no token needed: {access.host} is loopback, so only this machine reaches it and "
            "every request acts as an admin of every tenant"
        )
    return (
        f"token required: {access.host} is reachable beyond this machine; send "
        "'Authorization: Bearer <the --token value>' with every request"
    )


def dev_settings(
    *,
    redis_url: str | None,
    handler_modules: Sequence[str],
    database_url: str | None = None,
    redis_cluster: bool = False,
    partitions: int | None = None,
) -> Settings:
    """The settings of a dev process: memory unless a Redis URL is given; fast reads, a short
    flow cache; state and definitions in a database with ``database_url`` (S4)."""
    values: dict[str, Any] = {
        "backend": "redis" if redis_url else "memory",
        "handler_modules": tuple(handler_modules),
        "read_block_ms": DEV_READ_BLOCK_MS,
        "concurrency": 8,
        "flow_cache_ttl_seconds": DEV_FLOW_CACHE_TTL_SECONDS,
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
