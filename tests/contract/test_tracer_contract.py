"""The tracing port (C6): every tracer takes every call of its port without raising, hands on
a context only when it records, and lets an exception of the traced work through; the SDK
adapter exports what the operator docs describe, and an exporter that fails only warns.

Run on the OpenTelemetry adapter and on the null object used when tracing is off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plaita.adapters.otel.environment import tracer_from_environment
from plaita.adapters.otel.tracer import OtelTracer, WarningExporter, provider_from_environment
from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.null_objects import NO_TRACING, NoTracer
from plaita.application.ports import NodeRun, Tracer
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.tracing import TraceContext

ROOT = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor=1")
RUN = NodeRun(
    execution_id="x-1", flow_id="f", node_id="work", node_type="task", attempt=2, worker="w-1"
)


class Boom(Exception):
    pass


class TracerContract:
    """The port's promises; a subclass gives the tracer and says whether it records."""

    records: bool

    @pytest.fixture
    def tracer(self) -> Iterator[Tracer]:
        raise NotImplementedError

    def test_a_started_execution_has_a_context_only_when_recorded(self, tracer: Tracer) -> None:
        root = tracer.start_execution(
            execution_id="x-1", flow_id="f", tenant_id="default", link=ROOT
        )
        assert (root is not None) is self.records is tracer.enabled
        if root is not None:
            assert root.trace_id != ROOT.trace_id  # a new trace, the caller linked

    def test_a_node_span_is_in_the_roots_trace(self, tracer: Tracer) -> None:
        with tracer.node(RUN, root=ROOT, links=[ROOT]) as span:
            span.outcome("advanced")
            context = span.context()
        assert (context is not None) is self.records
        if context is not None:
            assert context.trace_id == ROOT.trace_id and context.span_id != ROOT.span_id

    def test_an_exception_leaves_the_span_unchanged(self, tracer: Tracer) -> None:
        with pytest.raises(Boom), tracer.node(RUN, root=ROOT):
            raise Boom("lost")
        with pytest.raises(Boom), tracer.span("publish t"):
            raise Boom("lost")

    def test_the_current_context_is_the_open_node_span_s(self, tracer: Tracer) -> None:
        assert tracer.current() is None  # no span open
        with tracer.node(RUN, root=ROOT) as span:
            assert tracer.current() == span.context()
        assert tracer.current() is None

    def test_a_span_with_a_parent_is_in_its_trace(self, tracer: Tracer) -> None:
        with tracer.span("publish t", parent=ROOT, attributes={"plaita.event.type": "t"}) as span:
            span.outcome("published", error=Boom("recorded, not raised"))
            context = span.context()
        assert context is None or context.trace_id == ROOT.trace_id


class TestNullTracer(TracerContract):
    records = False

    @pytest.fixture
    def tracer(self) -> Iterator[Tracer]:
        yield NO_TRACING


class TestOtelTracer(TracerContract):
    records = True

    @pytest.fixture
    def exporter(self) -> Iterator[InMemorySpanExporter]:
        spans = InMemorySpanExporter()
        yield spans
        spans.shutdown()

    @pytest.fixture
    def tracer(self, exporter: InMemorySpanExporter) -> Iterator[Tracer]:
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        yield OtelTracer(provider)
        provider.shutdown()

    def test_a_node_span_carries_the_runs_attributes(
        self, tracer: Tracer, exporter: InMemorySpanExporter
    ) -> None:
        with tracer.node(RUN, root=ROOT, links=[ROOT]) as span:
            span.outcome("suspended")
        [finished] = exporter.get_finished_spans()
        assert finished.name == "task work"
        assert dict(finished.attributes or {}) == {
            "plaita.execution.id": "x-1",
            "plaita.flow.id": "f",
            "plaita.node.id": "work",
            "plaita.node.type": "task",
            "plaita.node.attempt": 2,
            "plaita.tenant.id": "default",
            "plaita.worker.id": "w-1",
            "plaita.node.outcome": "suspended",
        }
        assert finished.parent is not None and f"{finished.parent.span_id:016x}" == ROOT.span_id
        assert finished.context is not None and finished.context.trace_state.get("vendor") == "1"
        [link] = finished.links
        assert f"{link.context.span_id:016x}" == ROOT.span_id

    def test_an_interrupted_span_says_so(
        self, tracer: Tracer, exporter: InMemorySpanExporter
    ) -> None:
        with pytest.raises(Boom), tracer.node(RUN, root=ROOT):
            raise Boom("lease lost")
        [finished] = exporter.get_finished_spans()
        assert (finished.attributes or {})["plaita.node.outcome"] == "interrupted"
        assert finished.status.description == "Boom: lease lost"

    def test_a_node_span_is_current_so_a_handlers_spans_are_its_children(
        self, tracer: Tracer, exporter: InMemorySpanExporter
    ) -> None:
        with tracer.node(RUN, root=ROOT), tracer.span("inside"):
            pass
        inner, outer = exporter.get_finished_spans()
        assert inner.parent is not None and outer.context is not None
        assert inner.parent.span_id == outer.context.span_id

    def test_an_sdk_failure_is_a_warning_and_the_work_goes_on(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        class BrokenTracer:
            def start_span(self, *args: object, **kwargs: object) -> object:
                raise RuntimeError("sdk broken")

        tracer = OtelTracer(TracerProvider(shutdown_on_exit=False))
        tracer._tracer = BrokenTracer()  # type: ignore[assignment]
        with caplog.at_level(logging.WARNING, "plaita.tracing"):
            assert tracer.start_execution(execution_id="x", flow_id="f", tenant_id="t") is None
            with tracer.node(RUN, root=ROOT) as span:
                span.outcome("advanced")
                assert span.context() is None
        assert caplog.text.count("event=tracing.failed") == 2


class Failing(SpanExporter):
    def __init__(self, *results: SpanExportResult | Exception) -> None:
        self.results = list(results)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    def shutdown(self) -> None:
        raise OSError("already closed")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        raise OSError("gone")


def test_an_exporter_that_fails_warns_once_a_streak_and_says_when_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """C6: exporter failures only warn; they never reach the step."""
    failing = Failing(
        ConnectionError("collector down"),
        SpanExportResult.FAILURE,
        SpanExportResult.SUCCESS,
        SpanExportResult.FAILURE,
    )
    exporter = WarningExporter(failing, name="otlp")
    with caplog.at_level(logging.INFO, "plaita.tracing"):
        results = [exporter.export([]) for _ in range(4)]
        exporter.shutdown()
        assert exporter.force_flush() is False
    assert results == [
        SpanExportResult.FAILURE,
        SpanExportResult.FAILURE,
        SpanExportResult.SUCCESS,
        SpanExportResult.FAILURE,
    ]
    messages = [record.getMessage() for record in caplog.records]
    assert [m.split(" ", 1)[0] for m in messages] == [
        "event=tracing.export_failed",
        "event=tracing.export_recovered",
        "event=tracing.export_failed",
        "event=tracing.shutdown_failed",
        "event=tracing.flush_failed",
    ]
    assert "collector down" in messages[0] and "lost_batches=2" in messages[1]


def test_a_provider_from_the_environment_names_its_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    provider = provider_from_environment(["console", "otlp"])
    try:
        assert provider.resource.attributes["service.name"] == "plaita"
    finally:
        provider.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-workers")
    provider = provider_from_environment([])
    try:
        assert provider.resource.attributes["service.name"] == "billing-workers"
    finally:
        provider.shutdown()


def test_the_batch_processor_is_what_exports() -> None:
    """A step never exports itself: every exporter sits behind a background batch."""
    provider = provider_from_environment(["console"])
    try:
        processors = provider._active_span_processor._span_processors
        assert [type(p) for p in processors] == [BatchSpanProcessor]
    finally:
        provider.shutdown()


@pytest.mark.parametrize(
    "environ",
    [{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_SDK_DISABLED": "true"}],
)
def test_tracing_not_asked_for_is_the_null_tracer(environ: dict[str, str]) -> None:
    assert isinstance(tracer_from_environment(environ), NoTracer)


def test_an_ignored_setting_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "plaita.tracing"):
        assert isinstance(tracer_from_environment({"OTEL_TRACES_EXPORTER": "zipkin"}), NoTracer)
    assert "event=tracing.setting_ignored" in caplog.text and "'zipkin'" in caplog.text


def event_resume(traceparent: str | None) -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="f",
        resume_type=ResumeType.EVENT,
        now_ms=1,
        generations=LEGACY_GENERATIONS,
        traceparent=traceparent,
    )


def test_a_resume_carrier_keeps_its_producers_context_on_the_wire() -> None:
    carrier = event_resume(ROOT.traceparent)
    assert decode_envelope(encode_envelope(carrier)) == carrier
    fields = encode_envelope(event_resume(None))
    assert "traceparent" not in fields["envelope"]
    garbled = {**fields, "envelope": fields["envelope"][:-1] + ',"traceparent":"garbage"}'}
    assert decode_envelope(garbled).traceparent is None
