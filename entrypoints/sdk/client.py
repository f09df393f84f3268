"""``plaita.Client`` and ``plaita.ExecutionHandle``: register flows, start executions, publish
events and await results from application code.

A client is the same wiring as every plaita process — one container (``build_container``),
the same use cases — opened on a URL: ``memory://`` (the in-process twin: nothing to run,
nothing kept; an embedded ``plaita.Worker`` advances the executions), ``redis://…`` /
``rediss://…`` / ``unix://…`` (a Redis), ``redis+cluster://host:port`` (a seed node of a Redis
Cluster). The deployment's other settings come from ``PLAITA_*`` as for every process, so a
client stamps the same generations on its carriers as the workers of its pool.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncGenerator, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, Union

import attrs
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from plaita.application.actor import Actor, actor_scope
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.flows import Registration, validate_registration
from plaita.application.use_cases.operator_controls.listing import ExecutionListing
from plaita.application.use_cases.operator_controls.shared import ControlResult
from plaita.application.use_cases.start_execution import StartedExecution
from plaita.domain.errors import (
    ClientClosedError,
    InvalidConfigurationError,
    StoreUnreachableError,
)
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow as FlowDefinition
from plaita.domain.flow_owners import SHARED, FlowOwner
from plaita.domain.ids import validate_execution_id
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.tenancy import DEFAULT_TENANT, validate_tenant_id
from plaita.entrypoints.container import (
    Container,
    build_library_container,
    dlq_key_problems,
)
from plaita.entrypoints.settings import Settings, worker_settings

if TYPE_CHECKING:
    from plaita.application.handlers import HandlerRegistry
    from plaita.entrypoints.sdk.flow import Flow

log = logging.getLogger("plaita.client")

JSON = Any
#: What ``Client.register`` takes: a built flow, a validated definition, an E1a document as
#: a mapping or JSON text, or the path of a JSON file.
FlowSource = Union["Flow", FlowDefinition, Mapping[str, JSON], str, bytes, "os.PathLike[str]"]

_URL_FORMS = (
    "memory:// (the in-process twin), redis://HOST:PORT/DB, rediss://… (TLS), "
    "unix:///path/to/redis.sock, or redis+cluster://HOST:PORT (a seed node of a Redis Cluster)"
)
#: An embedded worker's blocking reads: it stops within this (PLAITA_READ_BLOCK_MS wins).
EMBEDDED_READ_BLOCK_MS = 250


def client_settings(
    url: str, *, database_url: str | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """The settings of a client on ``url``: its store from the URL, the rest from
    ``PLAITA_*``; ``InvalidConfigurationError`` names every value that is wrong."""
    environ = os.environ if environ is None else environ
    if not isinstance(url, str):
        raise InvalidConfigurationError(f"a client URL is a string, got {url!r}: {_URL_FORMS}")
    scheme, sep, _rest = url.partition("://")
    values: dict[str, object] = {}
    if scheme == "memory" and sep:
        values["backend"] = "memory"
    elif scheme in ("redis", "rediss", "unix") and sep:
        values.update(backend="redis", redis_url=url)
    elif scheme in ("redis+cluster", "rediss+cluster") and sep:
        values.update(
            backend="redis",
            redis_url=url.replace("+cluster://", "://", 1),
            redis_cluster=True,
        )
    else:
        raise InvalidConfigurationError(
            f"client URL {url!r} is not one plaita serves: {_URL_FORMS}"
        )
    if database_url is not None:
        values.update(storage="sql", database_url=database_url)
    if "PLAITA_READ_BLOCK_MS" not in environ:
        values["read_block_ms"] = EMBEDDED_READ_BLOCK_MS
    settings, check = worker_settings(values, environ, checks=(dlq_key_problems,))
    for warning in check.warnings:
        log.warning(
            "event=config.fallback setting=%s value=%r used=%r: %s",
            warning.setting,
            warning.value,
            warning.used,
            warning.message,
        )
    return settings


class Client:
    """Register flows, start executions, publish events and await results.

    ``async with Client("redis://127.0.0.1:6379/0") as client:`` — the client connects on
    entry (``StoreUnreachableError`` when it cannot) and closes on exit. Every call runs in
    ``tenant``'s scope (``default`` when None); flows it registers belong to that tenant, or
    to the whole deployment when ``tenant`` is None.
    """

    def __init__(
        self,
        url: str = "memory://",
        *,
        database_url: str | None = None,
        tenant: str | None = None,
    ) -> None:
        if tenant is not None:
            validate_tenant_id(tenant)
        self.url = url
        self.tenant = tenant
        self._settings = client_settings(url, database_url=database_url)
        self._container: Container | None = None
        self._owns_container = True
        #: The allowlist of the worker running on this client, if one does (``Worker``).
        self._worker_handlers: HandlerRegistry | None = None

    @classmethod
    def _on(cls, container: Container, settings: Settings, *, tenant: str | None = None) -> Self:
        """A client on a container someone else opened and closes (``plaita worker``)."""
        client = cls.__new__(cls)
        client.url = settings.redis_url if settings.backend == "redis" else "memory://"
        client.tenant = tenant
        client._settings = settings
        client._container = container
        client._owns_container = False
        client._worker_handlers = None
        return client

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect (what ``async with`` does on entry); opening an open client does nothing."""
        if self._container is not None:
            return
        container = build_library_container(self._settings)
        if self._settings.backend == "redis":
            try:
                await container.redis_client().ping()
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                await container.redis_client().aclose()
                raise StoreUnreachableError(
                    f"cannot reach Redis at {self.url}: {exc}. Is it running, and is the URL right?"
                ) from None
            except RedisClusterException as exc:
                await container.redis_client().aclose()
                raise StoreUnreachableError(
                    f"cannot use the Redis Cluster whose seed is {self.url}: {exc}. Is the "
                    "cluster up and the URL one of its nodes (for a single Redis use redis://)?"
                ) from None
        self._container = container

    async def aclose(self) -> None:
        """Close the connections (what ``async with`` does on exit); idempotent."""
        container, self._container = self._container, None
        if container is None or not self._owns_container:
            return
        await container.end_notices().aclose()
        if self._settings.backend == "redis":
            await container.redis_client().aclose()
        if self._settings.storage == "sql":
            await container.sql_engine().dispose()

    @property
    def container(self) -> Container:
        """The wiring this client runs on (for an embedded ``Worker``)."""
        if self._container is None:
            raise ClientClosedError(
                "this Client is not open: use it inside `async with Client(...) as client:` "
                "(or call `await client.open()` first)"
            )
        return self._container

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def tenant_id(self) -> str:
        return self.tenant or DEFAULT_TENANT

    # --- flows -----------------------------------------------------------------------------

    async def register(self, flow: FlowSource, *, latest: bool = False) -> Registration:
        """Store ``flow`` (validated as any definition) for this client's tenant, or
        deployment-wide without one. The same document again changes nothing; another
        document under a registered version is ``FlowVersionConflictError``. It becomes the
        latest version (what ``start`` runs without ``version``) when it is higher than the
        latest by the version order, or with ``latest=True`` (a rollback); see
        ``registration.is_latest``."""
        definition = load_definition(flow)
        container = self.container
        if self._worker_handlers is not None:
            # The embedded worker will import the handlers: check every one now.
            validate_registration(definition, self._worker_handlers)
        owner = SHARED if self.tenant is None else FlowOwner.tenant(self.tenant)
        with _acting(self.tenant_id):
            registration: Registration = await container.flows().register(
                definition, owner=owner, latest=latest
            )
        return registration

    # --- executions ------------------------------------------------------------------------

    async def start(
        self,
        flow_id: str | Flow,
        input: Mapping[str, JSON] | None = None,
        *,
        version: str | None = None,
        execution_id: str | None = None,
        dedup_key: str | None = None,
        target_instance_id: str | None = None,
        priority: str = "normal",
    ) -> ExecutionHandle:
        """Start an execution of ``flow_id`` (its latest version unless ``version``) with
        ``input``; the handle's ``result()`` awaits its end. With ``dedup_key`` a second
        start with the same key returns the first one's execution (``handle.deduplicated``).
        With ``target_instance_id`` (a worker's instance id, ``Worker.instance_id``) it runs
        on that worker while it is running; otherwise on any. ``priority`` (``"high"``,
        ``"normal"``, ``"low"``; ``InvalidPriorityError`` otherwise) says which starts
        workers take first.
        """
        if not isinstance(flow_id, str):
            flow_id = flow_id.flow_id
        with _acting(self.tenant_id):
            started: StartedExecution = await self.container.start_execution()(
                flow_id,
                version=version,
                params=input,
                execution_id=execution_id,
                dedup_key=dedup_key,
                tenant_id=self.tenant_id,
                target_instance_id=target_instance_id,
                priority=priority,
            )
        return ExecutionHandle(self, started.execution_id, started=started)

    def handle(self, execution_id: str) -> ExecutionHandle:
        """A handle on an execution started before (by any process)."""
        return ExecutionHandle(self, validate_execution_id(execution_id))

    async def executions(
        self,
        flow_id: str | None = None,
        status: ExecutionStatus | str | None = None,
        *,
        limit: int = 50,
    ) -> AsyncGenerator[ExecutionPage, None]:
        """The tenant's executions, newest first, one page of at most ``limit`` at a time."""
        wanted = None if status is None else ExecutionStatus(status)
        cursor: str | None = None
        while True:
            with _acting(self.tenant_id):
                listing = await self.container.list_executions()(
                    flow_id=flow_id, status=wanted, limit=limit, cursor=cursor
                )
            page = ExecutionPage.of(listing)
            if page.items or page.next_cursor is None:
                yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # --- events ----------------------------------------------------------------------------

    async def publish(
        self,
        event_type: str,
        data: Mapping[str, JSON] | None = None,
        *,
        correlation_id: str | None = None,
        source: str | None = None,
    ) -> str:
        """Publish an event for this tenant; its id. An execution waiting for ``event_type``
        whose execution id is ``correlation_id`` (and whose filter matches) resumes with it;
        one that starts waiting later finds it in its inbox."""
        with _acting(self.tenant_id):
            event = await self.container.publish_event()(
                event_type,
                data=data,
                correlation_id=correlation_id,
                source=source,
                tenant_id=self.tenant_id,
            )
        return str(event.event_id)

    def __repr__(self) -> str:
        state = "open" if self._container is not None else "closed"
        return f"Client({self.url!r}, tenant={self.tenant!r}, {state})"


class ExecutionHandle:
    """One execution: its status, its result (awaited without polling the store), and the
    operator's controls on it."""

    def __init__(
        self, client: Client, execution_id: str, *, started: StartedExecution | None = None
    ) -> None:
        self._client = client
        self.execution_id = execution_id
        #: True when ``start`` found the dedup key's earlier execution instead of starting.
        self.deduplicated = started.deduplicated if started is not None else False

    async def status(self) -> ExecutionStatus:
        """The execution's status now — ``PENDING`` from its start until a worker picks it
        up; ``UnknownExecutionError`` when it does not exist (never started, or deleted)."""
        with _acting(self._client.tenant_id):
            state = await self._client.container.get_execution()(self.execution_id)
        return state.status

    async def result(self, timeout: float | None = None) -> JSON:
        """The ``end`` node's output once the execution ended.

        Raises ``ExecutionFailedError`` (its ``error`` is the recorded one) when it ended in
        error, ``ExecutionCancelledError`` when cancelled, ``ResultTimeoutError`` after
        ``timeout`` seconds (None: no limit) — the execution goes on.
        """
        with _acting(self._client.tenant_id):
            return await self._client.container.await_result()(self.execution_id, timeout_s=timeout)

    async def cancel(self) -> ControlResult:
        """Cancel it: a waiting execution at once, a running one at its next step."""
        return await self._control("cancel_execution")

    async def pause(self) -> ControlResult:
        """Hold it after the step that runs now, until ``unpause``."""
        return await self._control("pause_execution")

    async def unpause(self) -> ControlResult:
        """Let a paused execution go on where it was held."""
        return await self._control("unpause_execution")

    async def children(self, *, cursor: str | None = None, limit: int = 50) -> ExecutionPage:
        """One page of the executions its ``subflow`` and ``map`` nodes started: node by node
        in the flow's order, a map's in item order. Pass the page's ``next_cursor`` for the
        next one (None on the last); ``UnknownExecutionError`` when it does not exist."""
        with _acting(self._client.tenant_id):
            listing = await self._client.container.list_children()(
                self.execution_id, cursor=cursor, limit=limit
            )
        return ExecutionPage.of(listing)

    async def retry(self, from_node: str | None = None) -> ControlResult:
        """Run a failed execution again from the node that failed, or from ``from_node``."""
        with _acting(self._client.tenant_id):
            result: ControlResult = await self._client.container.retry_execution()(
                self.execution_id, from_node=from_node
            )
        return result

    async def _control(self, use_case: str) -> ControlResult:
        with _acting(self._client.tenant_id):
            result: ControlResult = await getattr(self._client.container, use_case)()(
                self.execution_id
            )
        return result

    def __repr__(self) -> str:
        return f"ExecutionHandle({self.execution_id!r})"


@attrs.frozen
class ExecutionSummary:
    """One execution in a listing: where it is and whether an operator holds it."""

    execution_id: str
    flow_id: str
    flow_version: str
    status: ExecutionStatus
    paused: bool
    cancel_requested: bool
    next_node_id: str | None
    last_node_id: str | None
    steps: int
    created_at_ms: int
    updated_at_ms: int
    error: ExecutionError | None
    #: The execution whose ``subflow`` or ``map`` node started it, and that node; None for
    #: an execution started any other way.
    parent_id: str | None = None
    parent_node_id: str | None = None

    @classmethod
    def of(cls, state: ExecutionState, flags: ControlFlags) -> ExecutionSummary:
        return cls(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            flow_version=state.flow_version,
            status=state.status,
            paused=flags.paused,
            cancel_requested=flags.cancel_requested,
            next_node_id=state.next_node_id,
            last_node_id=state.last_node_id,
            steps=state.steps,
            created_at_ms=state.created_at_ms,
            updated_at_ms=state.updated_at_ms,
            error=state.error,
            parent_id=None if state.parent is None else state.parent.execution_id,
            parent_node_id=None if state.parent is None else state.parent.node_id,
        )


@attrs.frozen
class ExecutionPage:
    """A page of ``Client.executions`` or ``ExecutionHandle.children``; ``next_cursor`` is
    None on the last one."""

    items: tuple[ExecutionSummary, ...]
    next_cursor: str | None

    @classmethod
    def of(cls, listing: ExecutionListing) -> ExecutionPage:
        return cls(
            tuple(ExecutionSummary.of(state, flags) for state, flags in listing.items),
            listing.next_cursor,
        )


def load_definition(flow: FlowSource) -> FlowDefinition:
    """The validated definition of any form ``register`` takes."""
    from plaita.entrypoints.sdk.flow import Flow  # the builder imports this module's callers

    if isinstance(flow, FlowDefinition):
        return flow
    if isinstance(flow, Flow):
        return flow.build()
    if isinstance(flow, Mapping):
        return FlowDefinition.from_document(flow)
    if isinstance(flow, os.PathLike):
        return FlowDefinition.from_json(Path(flow).read_bytes())
    return FlowDefinition.from_json(flow)


@contextlib.contextmanager
def _acting(tenant_id: str) -> Iterator[None]:
    """The tenant a client call acts for, and who: this process's user, through the SDK."""
    with tenant_scope(tenant_id), actor_scope(_SDK_ACTOR):
        yield


_SDK_ACTOR = Actor.os_user("sdk")
