"""``plaita.Worker``: advance executions inside the caller's event loop.

``async with Worker(client, handlers=[...]):`` runs, on the client's wiring and in the
running loop, what ``plaita dev`` runs beside its console: the worker loop (dispatches, timers,
retries, reclaim), and — unless ``event_filter=False`` — the event filter with its reconciler
and housekeeping, so one process needs no other service (the embedded mode). Leaving the
block drains: no new carrier is read, the dispatches already running finish (within the
drain timeout), the event filter finishes its notification. ``await worker.run()`` does the
same until it is cancelled (or ``stop`` is set).

``plaita worker`` is this object with ``event_filter=False`` and the deployment's settings;
``plaita dev`` is it with the console beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Self

from plaita.application.handlers import HandlerRegistry, handler_reference
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.recover import RecoveryReport
from plaita.domain.errors import (
    InvalidConfigurationError,
    UnknownHandlerError,
    WorkerAttachError,
)
from plaita.domain.reconcile import ReconcileSettings
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.container import Container, run_handlers_of
from plaita.entrypoints.event_filter import BackgroundJob, EventFilterService
from plaita.entrypoints.janitor import run_notification_trim, run_state_sweeper
from plaita.entrypoints.sdk.client import Client
from plaita.entrypoints.settings import Settings

log = logging.getLogger("plaita.worker")

Handler = Callable[..., Any]


class Worker:
    """The worker loop (and by default the event filter) of ``client``, in this event loop.

    ``handler_modules`` are the modules task handlers may come from (the allowlist every
    worker has, ``--handler-modules``); ``handlers`` adds the modules of these callables.
    ``concurrency`` bounds the dispatches at once (default: the settings', 16).
    """

    def __init__(
        self,
        client: Client,
        *,
        handler_modules: Iterable[str] = (),
        handlers: Iterable[Handler] = (),
        concurrency: int | None = None,
        event_filter: bool = True,
    ) -> None:
        if isinstance(handler_modules, str):
            raise TypeError(
                "handler_modules is a list of module names, got the string "
                f"{handler_modules!r}: pass [{handler_modules!r}]"
            )
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ValueError(f"concurrency must be a whole number >= 1, got {concurrency!r}")
        modules = {module.strip() for module in handler_modules if module.strip()}
        modules.update(handler_reference(handler).partition(":")[0] for handler in handlers)
        self.client = client
        self.handler_modules = tuple(sorted(modules))
        self.concurrency = concurrency
        self.event_filter = event_filter
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        #: What ``start`` recovered (SQL state under an in-memory queue), else None.
        self.recovered: RecoveryReport | None = None

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the services as tasks of the running loop (what ``async with`` does)."""
        if self._running:
            raise WorkerAttachError("this Worker already runs; start it once")
        client = self.client
        container = client.container
        if client._worker_handlers is not None:
            raise WorkerAttachError(
                f"another Worker already runs on {client!r}: one worker per client (it runs "
                f"{self.concurrency or client.settings.concurrency} dispatches at once; raise "
                "concurrency instead)"
            )
        _import_modules(self.handler_modules)
        registry = HandlerRegistry(self.handler_modules)
        run_handlers_of(container, registry, concurrency=self.concurrency)
        client._worker_handlers = registry
        self._running = True
        try:
            self.recovered = await prepare(container, client.settings)
            self._stop = asyncio.Event()
            self._serve_metrics(container, client.settings)
            self._tasks = [
                asyncio.create_task(service.run(self._stop), name=name)
                for name, service in services(container, client.settings, self.event_filter)
            ]
            alerts = container.alerts()
            if alerts is not None:
                self._tasks.append(asyncio.create_task(alerts.run(self._stop), name="alerts"))
        except BaseException:
            await self._release(container)
            raise

    async def stop(self) -> None:
        """Drain and stop (what leaving ``async with`` does); idempotent."""
        if not self._running:
            return
        self._stop.set()
        try:
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._tasks = []
            await self._release(self.client.container)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until cancelled or ``stop`` is set, then drain. A service that fails ends it
        with its exception."""
        async with self:
            waiters = [*self._tasks]
            stopper = asyncio.create_task((stop or asyncio.Event()).wait())
            try:
                await asyncio.wait([stopper, *waiters], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await stopper

    def _serve_metrics(self, container: Container, settings: Settings) -> None:
        try:
            container.metrics_exporter().serve()
        except OSError as exc:
            raise InvalidConfigurationError(
                f"cannot serve metrics on 127.0.0.1:{settings.metrics_port}: {exc}; choose "
                "another metrics port (PLAITA_METRICS_PORT, --metrics-port; 0 disables)"
            ) from None

    async def _release(self, container: Container) -> None:
        """Give back what ``start`` took: the metrics port, the alert sender, the blocking
        reads on the queue's partitions (what they read stays pending, for reclaim)."""
        try:
            container.metrics_exporter().close()
            alerts = container.alerts()
            if alerts is not None:
                await alerts.close()
            await container.queue().close()
        finally:
            self.client._worker_handlers = None
            self._running = False

    @property
    def running(self) -> bool:
        return self._running

    @property
    def instance_id(self) -> str:
        """This worker's instance id (the settings' consumer name, ``PLAITA_CONSUMER_NAME``):
        what ``Client.start(..., target_instance_id=...)`` names to run an execution here."""
        return self.client.settings.consumer_name

    def __repr__(self) -> str:
        modules = ", ".join(self.handler_modules) or "no handler modules"
        return f"Worker({self.client!r}, {modules}, {'running' if self._running else 'stopped'})"


async def prepare(container: Container, settings: Settings) -> RecoveryReport | None:
    """What runs before the services: another partition count than the deployment's is
    refused by name before anything starts; with SQL state under an in-memory queue (a
    restarted process lost every carrier) the executions are recovered."""
    await container.queue().ensure_group()
    if settings.storage != "sql" or settings.backend != "memory":
        return None
    with tenant_scope(DEFAULT_TENANT):
        report: RecoveryReport = await container.recover_after_restart()()
    return report


def services(
    container: Container, settings: Settings, event_filter: bool
) -> Sequence[tuple[str, Any]]:
    """The services of a worker, each with ``run(stop)``: the worker loop, and the event
    filter with its reconciler and housekeeping when ``event_filter``."""
    found: list[tuple[str, Any]] = [("worker", container.worker())]
    if event_filter:
        service: EventFilterService = container.event_filter(
            consumer=f"event-filter-{settings.consumer_name}",
            reconcile=container.reconcile_events(settings=ReconcileSettings()),
            background=housekeeping(container, settings),
        )
        found.append(("event_filter", service))
    return found


def housekeeping(container: Container, settings: Settings) -> dict[str, BackgroundJob]:
    """Beside the event filter: the trim of the notification stream (S5) and, with SQL
    storage, the sweep of expired state rows."""

    async def notification_trim(stop: asyncio.Event) -> None:
        await run_notification_trim(container, stop)

    jobs: dict[str, BackgroundJob] = {"notification_trim": notification_trim}
    if settings.storage != "sql":
        return jobs

    async def state_sweeper(stop: asyncio.Event) -> None:
        await run_state_sweeper(container, stop)

    jobs["state_sweeper"] = state_sweeper
    return jobs


def _import_modules(modules: Iterable[str]) -> None:
    """Import the allowlisted modules now, to fail before anything runs."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownHandlerError(
                f"handler module {module!r} cannot be imported: {exc}. Is it installed or on "
                "sys.path?"
            ) from None
