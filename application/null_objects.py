"""Null objects: the port of a feature that is off, so no caller tests for None.

Each takes every call of its port and does nothing, answering what "off" means. They live
here rather than among the adapters because they touch nothing outside the process: any
layer may build one (a worker without ``--metrics-port``, a test) without wiring adapters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

from plaita.application.ports.tracer import NodeRun
from plaita.domain.errors import RateLimitsUnavailableError, SuspensionRegistrationError
from plaita.domain.events import Event, EventSubscription
from plaita.domain.failures import HttpRequestError
from plaita.domain.http_calls import HttpRequest, HttpResponse
from plaita.domain.rate_limits import RateRule, Take
from plaita.domain.tracing import TraceContext


class NoEventSource:
    """EventWaiter of a run in one process that was given no event bus: an ``event`` node
    cannot wait, so it fails with a named error that says what to do (E6)."""

    async def wait_for_event(
        self, subscription: EventSubscription, timeout_ms: int | None
    ) -> Event | None:
        raise SuspensionRegistrationError(
            f"node {subscription.node_id!r} waits for {subscription.event_type!r} but this run "
            "has no event source; run the flow on a worker (distributed mode) or pass an "
            "event bus"
        )


class NoHttpClient:
    """HttpClient of a run built without one (a test, an embedding that passed none): an
    ``http`` node fails with a named, deterministic error that says what to do (E11)."""

    async def send(
        self, request: HttpRequest, *, timeout_seconds: float, max_response_bytes: int
    ) -> HttpResponse:
        raise HttpRequestError(
            f"an http node calls {request.url} but this run was given no HTTP client; run it "
            "through plaita (worker, plaita run, plaita dev) or pass http_client="
        )


class NoRateBuckets:
    """RateBuckets of a run built without them (a test, an embedding that passed none): a
    node with a ``rate_limit`` fails with a named error rather than run unlimited (W23)."""

    async def take(self, key: str, rule: RateRule, *, now_ms: int) -> Take:
        raise RateLimitsUnavailableError(
            f"a node is limited by rate limit {key!r} but this run was given no rate buckets; "
            "run it through plaita (worker, plaita run) or pass rate_buckets="
        )


class NoMetrics:
    """WorkerMetrics with metrics off (``--metrics-port 0``): every call records nothing."""

    enabled = False

    def dispatched(self, outcome: str, disposition: str) -> None:
        pass

    def crashed(self) -> None:
        pass

    def dead_lettered(self, reason: str) -> None:
        pass

    def guard_kept(self, reason: str) -> None:
        pass

    def dlq_trimmed(self, count: int) -> None:
        pass

    def flow_control_waited(self, reason: str) -> None:
        pass

    def reclaim_skipped(self) -> None:
        pass

    def resumed(self, latency_seconds: float) -> None:
        pass

    def queue_sizes(self, *, length: int, pending: int, dead_letters: int) -> None:
        pass

    def worker_up(self, up: bool) -> None:
        pass

    def heartbeat(self, at_seconds: float) -> None:
        pass

    def disk_blocked(self, blocked: bool) -> None:
        pass


class NoMetricsExporter:
    """MetricsExporter with metrics off: nothing listens."""

    def serve(self) -> None:
        return None

    def close(self) -> None:
        pass


class NoSpan:
    """Span of a tracer that records nothing: no context to hand on."""

    def context(self) -> TraceContext | None:
        return None

    def outcome(self, outcome: str, *, error: BaseException | None = None) -> None:
        pass


class NoTracer:
    """Tracer with tracing off (the SDK is not installed, or no exporter is configured):
    no span, no context, nothing stored with the execution."""

    enabled = False

    def start_execution(
        self,
        *,
        execution_id: str,
        flow_id: str,
        tenant_id: str,
        link: TraceContext | None = None,
    ) -> TraceContext | None:
        return None

    @contextlib.contextmanager
    def node(
        self, run: NodeRun, *, root: TraceContext, links: Sequence[TraceContext] = ()
    ) -> Iterator[NoSpan]:
        yield NoSpan()

    def current(self) -> TraceContext | None:
        return None

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: TraceContext | None = None,
        attributes: Mapping[str, str | int] | None = None,
    ) -> Iterator[NoSpan]:
        yield NoSpan()


#: The one tracer of every use case built without one (tests, tools): it holds no state.
NO_TRACING = NoTracer()
#: The rate buckets of every run built without them.
NO_RATE_BUCKETS = NoRateBuckets()
