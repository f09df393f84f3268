"""``plaita.SyncClient``: the ``Client``'s methods, blocking, for Django, Flask and scripts.

It runs a ``Client`` on an event loop of its own, in one daemon thread started when the
client opens, and hands every call to it. Called from inside a running event loop it would
block that loop, so it refuses with ``SyncClientInEventLoopError`` (use ``Client`` there).
Any number of threads may share one ``SyncClient``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from plaita.application.use_cases.flows import Registration
from plaita.application.use_cases.operator_controls.shared import ControlResult
from plaita.domain.errors import ClientClosedError, SyncClientInEventLoopError
from plaita.domain.execution import ExecutionStatus
from plaita.entrypoints.sdk.client import (
    Client,
    ExecutionHandle,
    ExecutionPage,
    FlowSource,
)

if TYPE_CHECKING:
    from plaita.entrypoints.sdk.flow import Flow

T = TypeVar("T")
JSON = Any

#: How long closing waits for the loop's thread to finish.
CLOSE_TIMEOUT_S = 10.0


class SyncClient:
    """``Client``, blocking: ``with SyncClient("redis://…") as client:``."""

    def __init__(
        self,
        url: str = "memory://",
        *,
        database_url: str | None = None,
        tenant: str | None = None,
    ) -> None:
        self._client = Client(url, database_url=database_url, tenant=tenant)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Start the client's loop thread and connect; opening an open client does nothing."""
        _refuse_in_loop("open")
        with self._lock:
            if self._loop is not None:
                return
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="plaita-sync-client")
            thread.daemon = True
            thread.start()
            try:
                asyncio.run_coroutine_threadsafe(self._client.open(), loop).result()
            except BaseException:
                _stop_loop(loop, thread)
                raise
            self._loop, self._thread = loop, thread

    def close(self) -> None:
        """Close the connections and stop the loop thread; idempotent."""
        _refuse_in_loop("close")
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._client.aclose(), loop).result(CLOSE_TIMEOUT_S)
        finally:
            _stop_loop(loop, thread)

    @property
    def client(self) -> Client:
        """The async client underneath (run on this client's own loop only)."""
        return self._client

    # --- the Client's methods, blocking ----------------------------------------------------

    def register(self, flow: FlowSource, *, latest: bool = False) -> Registration:
        return self._call(self._client.register(flow, latest=latest), "register")

    def start(
        self,
        flow_id: str | Flow,
        input: Mapping[str, JSON] | None = None,
        *,
        version: str | None = None,
        execution_id: str | None = None,
        dedup_key: str | None = None,
        target_instance_id: str | None = None,
        priority: str = "normal",
    ) -> SyncExecutionHandle:
        handle = self._call(
            self._client.start(
                flow_id,
                input,
                version=version,
                execution_id=execution_id,
                dedup_key=dedup_key,
                target_instance_id=target_instance_id,
                priority=priority,
            ),
            "start",
        )
        return SyncExecutionHandle(self, handle)

    def handle(self, execution_id: str) -> SyncExecutionHandle:
        return SyncExecutionHandle(self, self._client.handle(execution_id))

    def publish(
        self,
        event_type: str,
        data: Mapping[str, JSON] | None = None,
        *,
        correlation_id: str | None = None,
        source: str | None = None,
    ) -> str:
        return self._call(
            self._client.publish(event_type, data, correlation_id=correlation_id, source=source),
            "publish",
        )

    def executions(
        self,
        flow_id: str | None = None,
        status: ExecutionStatus | str | None = None,
        *,
        limit: int = 50,
    ) -> Iterator[ExecutionPage]:
        """The tenant's executions, newest first, one page at a time."""
        pages = self._client.executions(flow_id, status, limit=limit)

        async def following() -> ExecutionPage | None:
            return await anext(pages, None)

        try:
            while (page := self._call(following(), "executions")) is not None:
                yield page
        finally:
            if self._loop is not None:
                self._call(pages.aclose(), "executions")

    def _call(self, coroutine: Coroutine[Any, Any, T], name: str) -> T:
        try:
            _refuse_in_loop(name)
            loop = self._loop
            if loop is None:
                raise ClientClosedError(
                    "this SyncClient is not open: use it inside `with SyncClient(...) as "
                    "client:` (or call `client.open()` first)"
                )
        except BaseException:
            coroutine.close()
            raise
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def __repr__(self) -> str:
        return f"Sync{self._client!r}"


class SyncExecutionHandle:
    """``ExecutionHandle``, blocking."""

    def __init__(self, client: SyncClient, handle: ExecutionHandle) -> None:
        self._client = client
        self._handle = handle
        self.execution_id = handle.execution_id
        self.deduplicated = handle.deduplicated

    def status(self) -> ExecutionStatus:
        return self._client._call(self._handle.status(), "status")

    def result(self, timeout: float | None = None) -> JSON:
        return self._client._call(self._handle.result(timeout), "result")

    def cancel(self) -> ControlResult:
        return self._client._call(self._handle.cancel(), "cancel")

    def pause(self) -> ControlResult:
        return self._client._call(self._handle.pause(), "pause")

    def unpause(self) -> ControlResult:
        return self._client._call(self._handle.unpause(), "unpause")

    def children(self, *, cursor: str | None = None, limit: int = 50) -> ExecutionPage:
        return self._client._call(self._handle.children(cursor=cursor, limit=limit), "children")

    def retry(self, from_node: str | None = None) -> ControlResult:
        return self._client._call(self._handle.retry(from_node), "retry")

    def __repr__(self) -> str:
        return f"SyncExecutionHandle({self.execution_id!r})"


def _refuse_in_loop(name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise SyncClientInEventLoopError(
        f"SyncClient.{name}() was called inside a running event loop, which it would block: "
        "in async code use plaita.Client (`await client.…`); keep SyncClient for threads "
        "without a loop (Django, Flask, scripts)"
    )


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join(CLOSE_TIMEOUT_S)
    if not thread.is_alive():
        loop.close()
