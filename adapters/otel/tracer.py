"""The Tracer port on the OpenTelemetry SDK (C6); imported only when tracing is on.

Contexts cross process boundaries as W3C ``traceparent``/``tracestate`` strings, read and
written with the SDK's own propagator. Spans are exported in the background
(``BatchSpanProcessor``): a step never waits on an exporter, and an exporter that fails is
logged as a warning (``WarningExporter``), never raised. A failure inside the SDK itself is
logged too, and the step goes on without its span.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Link, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from plaita.application.null_objects import NoSpan
from plaita.application.ports import NodeRun, Span
from plaita.domain.tracing import TraceContext

log = logging.getLogger("plaita.tracing")

#: The service name when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES gives one.
DEFAULT_SERVICE_NAME = "plaita"
_PROPAGATOR = TraceContextTextMapPropagator()


def _plaita_version() -> str:
    try:
        return version("plaita")
    except PackageNotFoundError:
        return "0+unknown"


# --- set-up from the environment ---------------------------------------------------------


def provider_from_environment(exporters: Sequence[str]) -> TracerProvider:
    """A provider exporting to ``exporters`` (``console``, ``otlp``), configured by the SDK
    from the ``OTEL_*`` variables: resource and service name, sampler, batch timings, and
    the OTLP endpoint, headers and timeout."""
    resource = Resource.create()
    service = str(resource.attributes.get(SERVICE_NAME, ""))
    if not service or service.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for name in exporters:
        exporter: SpanExporter = ConsoleSpanExporter() if name == "console" else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(WarningExporter(exporter, name=name)))
    return provider


def global_sdk_provider() -> TracerProvider | None:
    """The SDK provider the application set as the global one; None when it set none."""
    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, TracerProvider) else None


class WarningExporter(SpanExporter):
    """An exporter whose failures are warnings: one when a streak of failed exports begins,
    one line when exports succeed again; whatever it raises is caught."""

    def __init__(self, exporter: SpanExporter, *, name: str) -> None:
        self._exporter = exporter
        self._name = name
        self._failed_batches = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._exporter.export(spans)
            error = "" if result is SpanExportResult.SUCCESS else "the exporter reported failure"
        except Exception as exc:
            result, error = SpanExportResult.FAILURE, repr(exc)
        if result is SpanExportResult.SUCCESS:
            if self._failed_batches:
                log.info(
                    "event=tracing.export_recovered exporter=%s lost_batches=%d",
                    self._name,
                    self._failed_batches,
                )
                self._failed_batches = 0
            return result
        self._failed_batches += 1
        if self._failed_batches == 1:
            log.warning(
                "event=tracing.export_failed exporter=%s spans=%d error=%s: these spans are "
                "lost, the steps ran and are stored; check the exporter's settings "
                "(OTEL_EXPORTER_OTLP_ENDPOINT) and that the collector is up. Later failures "
                "are counted until an export succeeds",
                self._name,
                len(spans),
                error,
            )
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        try:
            self._exporter.shutdown()
        except Exception as exc:
            log.warning("event=tracing.shutdown_failed exporter=%s error=%r", self._name, exc)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        try:
            return self._exporter.force_flush(timeout_millis)
        except Exception as exc:
            log.warning("event=tracing.flush_failed exporter=%s error=%r", self._name, exc)
            return False


# --- the port ----------------------------------------------------------------------------


def _extract(context: TraceContext) -> otel_context.Context:
    carrier = {"traceparent": context.traceparent}
    if context.tracestate:
        carrier["tracestate"] = context.tracestate
    return _PROPAGATOR.extract(carrier, context=otel_context.Context())


def _inject(span: trace.Span) -> TraceContext | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return TraceContext.parse(carrier.get("traceparent"), carrier.get("tracestate"))


def _links(contexts: Sequence[TraceContext]) -> list[Link]:
    links = []
    for context in contexts:
        span_context = trace.get_current_span(_extract(context)).get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context))
    return links


def _ambient_link() -> list[Link]:
    current = trace.get_current_span().get_span_context()
    return [Link(current)] if current.is_valid else []


def _failed(what: str, exc: Exception) -> None:
    log.warning(
        "event=tracing.failed span=%s error=%r: this span is not recorded; the step goes on",
        what,
        exc,
    )


class OtelSpan:
    """Span on an SDK span; ``outcome_key`` names the attribute its outcome is written to."""

    def __init__(self, span: trace.Span, *, outcome_key: str) -> None:
        self._span = span
        self._outcome_key = outcome_key
        self._ended_with: str | None = None

    def context(self) -> TraceContext | None:
        try:
            return _inject(self._span)
        except Exception as exc:
            _failed("context", exc)
            return None

    def outcome(self, outcome: str, *, error: BaseException | None = None) -> None:
        self._ended_with = outcome
        try:
            self._span.set_attribute(self._outcome_key, outcome)
            if error is not None:
                self._span.record_exception(error)
                self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        except Exception as exc:
            _failed("outcome", exc)

    def interrupted(self, error: BaseException) -> None:
        """An exception left the span before it was given an outcome (a lost lease, a stop)."""
        if self._ended_with is None:
            self.outcome("interrupted", error=error)


class OtelTracer:
    """Tracer on an SDK ``TracerProvider``; ``install_globally`` makes it the process's
    global provider too (when none is set), so a handler's own spans join the node's."""

    enabled = True

    def __init__(self, provider: TracerProvider, *, install_globally: bool = False) -> None:
        self._tracer = provider.get_tracer("plaita", _plaita_version())
        if install_globally and global_sdk_provider() is None:
            trace.set_tracer_provider(provider)

    def start_execution(
        self,
        *,
        execution_id: str,
        flow_id: str,
        tenant_id: str,
        link: TraceContext | None = None,
    ) -> TraceContext | None:
        try:
            links = _links([link] if link is not None else []) + _ambient_link()
            # A new trace (an empty parent context): one trace per execution, whoever
            # started it; the starter is a link, not the parent.
            span = self._tracer.start_span(
                f"execution {flow_id}",
                context=otel_context.Context(),
                links=links,
                attributes={
                    "plaita.execution.id": execution_id,
                    "plaita.flow.id": flow_id,
                    "plaita.tenant.id": tenant_id,
                },
            )
            span.end()
            return _inject(span)
        except Exception as exc:
            _failed("execution", exc)
            return None

    @contextlib.contextmanager
    def node(
        self, run: NodeRun, *, root: TraceContext, links: Sequence[TraceContext] = ()
    ) -> Iterator[Span]:
        attributes: dict[str, str | int] = {
            "plaita.execution.id": run.execution_id,
            "plaita.flow.id": run.flow_id,
            "plaita.node.id": run.node_id,
            "plaita.node.type": run.node_type,
            "plaita.node.attempt": run.attempt,
            "plaita.tenant.id": run.tenant_id,
        }
        if run.worker:
            attributes["plaita.worker.id"] = run.worker
        with self._open(
            f"{run.node_type} {run.node_id}",
            parent=_extract(root),
            links=_links(links),
            attributes=attributes,
            outcome_key="plaita.node.outcome",
        ) as span:
            yield span

    def current(self) -> TraceContext | None:
        try:
            span = trace.get_current_span()
            return _inject(span) if span.get_span_context().is_valid else None
        except Exception as exc:
            _failed("current", exc)
            return None

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: TraceContext | None = None,
        attributes: Mapping[str, str | int] | None = None,
    ) -> Iterator[Span]:
        with self._open(
            name,
            parent=None if parent is None else _extract(parent),
            links=[],
            attributes=dict(attributes or {}),
            outcome_key="plaita.outcome",
        ) as span:
            yield span

    @contextlib.contextmanager
    def _open(
        self,
        name: str,
        *,
        parent: otel_context.Context | None,
        links: list[Link],
        attributes: dict[str, str | int],
        outcome_key: str,
    ) -> Iterator[Span]:
        """A span that is current while open; None ``parent``: the ambient one's child."""
        try:
            span = self._tracer.start_span(name, context=parent, links=links, attributes=attributes)
            token = otel_context.attach(trace.set_span_in_context(span))
        except Exception as exc:
            _failed(name, exc)
            yield NoSpan()
            return
        handle = OtelSpan(span, outcome_key=outcome_key)
        try:
            yield handle
        except BaseException as exc:
            handle.interrupted(exc)
            raise
        finally:
            with contextlib.suppress(Exception):
                otel_context.detach(token)
            try:
                span.end()
            except Exception as exc:
                _failed(name, exc)
