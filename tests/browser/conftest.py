"""A real console and a real headless Chromium for the page's tests (C2).

The console runs in this process, on its own thread and event loop: uvicorn serving
``create_app`` over the memory twin, with the production worker loop and event filter beside
it (as ``plaita demo`` runs them), the approval example registered and one admin token. The
browser is the system Chromium driven by Playwright; no browser is ever downloaded
(``scripts/test`` installs Debian's ``chromium`` when it is missing).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import shutil
import threading
import types
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn
from dependency_injector import providers
from playwright.sync_api import Browser, Page, expect, sync_playwright

from plaita.application.codec import encode_envelope
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import Delivery
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli_support import import_handler_modules, load_flow_file
from plaita.entrypoints.console.app import create_app
from plaita.entrypoints.container import build_container
from plaita.entrypoints.event_filter import EventFilterService
from plaita.entrypoints.settings import Settings
from plaita.entrypoints.worker import Worker

REPO_ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "browser-test-admin-token-0123456789"
#: A tenant's own admin: it may read the deployment's tenant settings of acme, not change them.
ACME_ADMIN_TOKEN = "browser-test-acme-admin-token-0123"
#: Every wait of these tests is bounded; a broken page fails in seconds, never hangs.
START_TIMEOUT_SECONDS = 20.0
STOP_TIMEOUT_SECONDS = 10.0
BROWSER_TIMEOUT_MS = 15_000

T = TypeVar("T")
#: The browser tests' own handler module, resolved by the registry without an import.
BROWSER_HANDLERS = "browser"
#: Attempts of ``browser:flaky`` that fail before one succeeds, per execution.
FLAKY_FAILURES = 2
_flaky_attempts: dict[str, int] = {}


def _flaky(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Fails twice with a temporary error (retried), then answers: a retrying execution."""
    seen = _flaky_attempts[ctx.execution_id] = _flaky_attempts.get(ctx.execution_id, 0) + 1
    if seen <= FLAKY_FAILURES:
        raise ConnectionError(f"the customer service did not answer (try {seen})")
    return {"customer": params.get("customer"), "plan": "gold"}


#: Set by a test to let every ``browser:hold`` handler end; each ends by itself after 15 s.
HOLD_RELEASED = threading.Event()


async def _hold(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Runs until the test releases it (bounded): an execution holding its slot."""
    for _ in range(300):
        if HOLD_RELEASED.is_set():
            break
        await asyncio.sleep(0.05)
    return {"customer": params.get("customer")}


browser_handlers = types.SimpleNamespace(flaky=_flaky, hold=_hold)
#: One running execution per customer: a second one waits for the first's slot.
ONE_PER_CUSTOMER_FLOW: dict[str, Any] = {
    "flow_id": "invoice_run",
    "version": "1",
    "start": "bill",
    "concurrency": {"key": "${customer}", "limit": 1},
    "nodes": [
        {
            "id": "bill",
            "type": "task",
            "handler": f"{BROWSER_HANDLERS}:hold",
            "params": {"customer": "${customer}"},
            "next": "done",
        },
        {"id": "done", "type": "end", "output": "$NODE['bill']"},
    ],
}
LOOKUP_FLOW: dict[str, Any] = {
    "flow_id": "lookup",
    "version": "1",
    "start": "fetch",
    "nodes": [
        {
            "id": "fetch",
            "type": "task",
            "handler": f"{BROWSER_HANDLERS}:flaky",
            "params": {"customer": "${customer}"},
            "retryTimes": 3,
            "next": "done",
        },
        {"id": "done", "type": "end", "output": "$NODE['fetch']"},
    ],
}


class ConsoleServer:
    """The console with a worker and an event filter on the memory twin, on one thread."""

    def __init__(self) -> None:
        self.url = ""
        self.container: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="console-under-test", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_SECONDS):
            raise AssertionError(f"the console did not start within {START_TIMEOUT_SECONDS} s")
        if self._failure is not None:
            raise AssertionError(f"the console failed to start: {self._failure!r}")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT_SECONDS)
        if self._thread.is_alive():
            raise AssertionError(f"the console did not stop within {STOP_TIMEOUT_SECONDS} s")
        if self._failure is not None:
            raise AssertionError(f"the console failed: {self._failure!r}")

    def call(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``work(container)`` on the console's loop and return its result."""
        assert self._loop is not None, "the console is not running"
        future = asyncio.run_coroutine_threadsafe(work(self.container), self._loop)
        return future.result(START_TIMEOUT_SECONDS)

    def dead_letter_start(self, execution_id: str, params: dict[str, Any]) -> str:
        """A start carrier of the approval flow, dead-lettered as a worker gives one up."""

        async def work(container: Any) -> str:
            envelope = TaskEnvelope.start(
                execution_id=execution_id,
                flow_id="approval",
                version="1",
                params=params,
                now_ms=container.clock().now_ms(),
                generations=LEGACY_GENERATIONS,
            )
            delivery = Delivery(
                message_id="0-1", envelope=envelope, raw=encode_envelope(envelope), delivery_count=5
            )
            dlq_id: str = await container.queue().dead_letter(
                delivery, "poison: seeded by the browser test"
            )
            return dlq_id

        return self.call(work)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the test thread by start() / stop()
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        settings = Settings(
            backend="memory",
            handler_modules=("examples.handlers",),
            read_block_ms=20,
            concurrency=4,
        )
        container = self.container = build_container(settings)
        container.handlers.override(
            providers.Object(
                HandlerRegistry(
                    [*settings.handler_modules, BROWSER_HANDLERS],
                    importer=lambda name: (
                        browser_handlers
                        if name == BROWSER_HANDLERS
                        else importlib.import_module(name)
                    ),
                )
            )
        )
        import_handler_modules(settings.handler_modules)
        await container.flows().register(
            load_flow_file(REPO_ROOT / "examples/flows/approval.json"), owner=SHARED
        )
        await container.flows().register(Flow.from_document(LOOKUP_FLOW), owner=SHARED)
        await container.flows().register(Flow.from_document(ONE_PER_CUSTOMER_FLOW), owner=SHARED)
        app = create_app(
            container,
            tokens=[
                {"token": ADMIN_TOKEN, "name": "browser-test", "role": "admin", "tenants": ["*"]},
                {
                    "token": ACME_ADMIN_TOKEN,
                    "name": "acme-admin",
                    "role": "admin",
                    "tenants": ["acme"],
                },
            ],
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        worker = Worker(
            queue=container.queue(),
            process=container.process_task(),
            delay=container.delay_queue(),
            clock=container.clock(),
            consumer="browser-test-worker",
            concurrency=settings.concurrency,
            read_block_ms=settings.read_block_ms,
        )
        event_filter = EventFilterService(
            events=container.events(),
            filter_event=container.filter_event(),
            consumer="browser-test-event-filter",
            read_block_ms=settings.read_block_ms,
        )
        services = [
            asyncio.create_task(worker.run(self._stop)),
            asyncio.create_task(event_filter.run(self._stop)),
        ]
        serving = asyncio.create_task(server.serve())
        try:
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                while not server.started:
                    if serving.done():
                        serving.result()
                        raise OSError("uvicorn stopped while starting")
                    await asyncio.sleep(0.02)
            port = server.servers[0].sockets[0].getsockname()[1]
            self.url = f"http://127.0.0.1:{port}/"
            self._ready.set()
            await self._stop.wait()
        finally:
            self._stop.set()
            server.should_exit = True
            async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
                await asyncio.gather(serving, *services, return_exceptions=True)


@pytest.fixture
def console() -> Iterator[ConsoleServer]:
    server = ConsoleServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def chromium_path() -> str:
    """The system Chromium (Debian's ``chromium``); never a downloaded build."""
    configured = os.environ.get("PLAITA_CHROMIUM")
    found = configured or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found or not Path(found).exists():
        raise AssertionError(
            "no Chromium found for the browser tests: install Debian's package "
            "(apt-get install -y chromium; scripts/test does it) or set PLAITA_CHROMIUM to its path"
        )
    return found


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, timeout=BROWSER_TIMEOUT_MS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="light")
    context.set_default_timeout(BROWSER_TIMEOUT_MS)
    expect.set_options(timeout=BROWSER_TIMEOUT_MS)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()
