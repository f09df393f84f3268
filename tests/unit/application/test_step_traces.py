"""One trace per execution (C6): the worker step, the start, the publish and the event filter
on the memory twin, traced by the OpenTelemetry SDK into its in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from plaita.adapters.otel.tracer import OtelTracer
from plaita.application.null_objects import NO_TRACING
from plaita.application.tenancy import tenant_scope
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tracing import TraceContext

from .conftest import handler_registry
from .twin import Twin

#: A caller's trace (an incoming request), as a W3C header would carry it.
CALLER = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.shutdown()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Iterator[OtelTracer]:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield OtelTracer(provider)
    provider.shutdown()


async def drain(twin: Twin) -> list[str]:
    """Run every queued carrier as a worker would; the outcomes."""
    return [result.outcome for result in await twin.drain_queue()]


async def load(twin: Twin, execution_id: str) -> ExecutionState:
    with tenant_scope("default"):
        state = await twin.executions.load(execution_id)
    assert state is not None
    return state


def trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def node_spans(exporter: InMemorySpanExporter, execution_id: str) -> list[ReadableSpan]:
    return [
        span
        for span in exporter.get_finished_spans()
        if span.attributes
        and span.attributes.get("plaita.execution.id") == execution_id
        and "plaita.node.id" in span.attributes
    ]


def names(traceparent: str | None, span: ReadableSpan) -> bool:
    """``traceparent`` is ``span``'s context (whatever its flags)."""
    context = TraceContext.parse(traceparent)
    return context is not None and (context.trace_id, int(context.span_id, 16)) == (
        trace_id(span),
        span_id(span),
    )


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith(prefix)]


def attribute(span: ReadableSpan, name: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(name)


async def test_an_approval_run_across_a_wait_is_one_trace_with_every_node_span(
    twin: Twin, tracer: OtelTracer, exporter: InMemorySpanExporter
) -> None:
    """C6: start → task → if → event wait (suspends) → publish → filter → resume → if → task
    → end: every node span is a child of the execution's root, in the one trace stored with
    the execution; the resume links to the span that suspended and to the filter's span."""
    traced = attrs.evolve(twin, tracer=tracer)
    started = await traced.start_execution("approval", params={"amount": 5000}, execution_id="x-1")
    assert started.execution_id == "x-1"
    stored = await load(traced, "x-1")
    assert stored.trace is not None and stored.status is ExecutionStatus.PENDING
    [root] = named(exporter, "execution ")
    assert trace_id(root) == stored.trace.trace_id and root.parent is None

    assert await drain(traced) == ["suspended"]
    suspended = await load(traced, "x-1")
    assert suspended.trace is not None and suspended.trace.root == stored.trace.root
    [waiting] = [s for s in node_spans(exporter, "x-1") if attribute(s, "plaita.node.id") == "wait"]
    assert attribute(waiting, "plaita.node.outcome") == "suspended"
    assert names(suspended.trace.suspended_by, waiting)

    event = await traced.publish_event(
        "approval_decision", data={"approved": True}, correlation_id="x-1"
    )
    [publish] = named(exporter, "publish ")
    assert names(event.traceparent, publish)
    assert await traced.filter_event(event.event_id) == 1
    [filtered] = named(exporter, "filter ")
    assert trace_id(filtered) == trace_id(publish) != stored.trace.trace_id
    assert filtered.parent is not None and filtered.parent.span_id == span_id(publish)

    assert await drain(traced) == ["completed"]
    done = await load(traced, "x-1")
    assert done.status is ExecutionStatus.COMPLETED

    spans = node_spans(exporter, "x-1")
    ran = [(attribute(s, "plaita.node.id"), attribute(s, "plaita.node.outcome")) for s in spans]
    assert ran == [
        ("request", "advanced"),
        ("check", "advanced"),
        ("wait", "suspended"),
        ("wait", "advanced"),
        ("decide", "advanced"),
        ("ship", "advanced"),
        ("done", "ended"),
    ]
    assert {trace_id(span) for span in spans} == {stored.trace.trace_id}
    assert all(span.parent is not None and span.parent.span_id == span_id(root) for span in spans)
    types = {attribute(s, "plaita.node.id"): attribute(s, "plaita.node.type") for s in spans}
    assert types == {
        "request": "task",
        "check": "if",
        "wait": "event",
        "decide": "if",
        "ship": "task",
        "done": "end",
    }
    assert {attribute(s, "plaita.node.attempt") for s in spans} == {1}
    assert {attribute(s, "plaita.flow.id") for s in spans} == {"approval"}
    assert {attribute(s, "plaita.worker.id") for s in spans} == {"worker-a"}
    assert all(span.status.status_code is not StatusCode.ERROR for span in spans)

    resumed = spans[3]
    linked = {(f"{link.context.trace_id:032x}", link.context.span_id) for link in resumed.links}
    assert linked == {
        (trace_id(waiting), span_id(waiting)),
        (trace_id(filtered), span_id(filtered)),
    }
    assert all(not span.links for span in spans if span is not resumed)


async def test_a_start_links_to_the_callers_context_and_begins_a_new_trace(
    twin: Twin, tracer: OtelTracer, exporter: InMemorySpanExporter
) -> None:
    traced = attrs.evolve(twin, tracer=tracer)
    await traced.start_execution(
        "approval", params={"amount": 5}, execution_id="x-1", trace_link=CALLER
    )
    [root] = named(exporter, "execution ")
    assert trace_id(root) != CALLER.trace_id and root.parent is None
    [link] = root.links
    assert f"{link.context.trace_id:032x}" == CALLER.trace_id
    assert attribute(root, "plaita.execution.id") == "x-1"


async def test_a_publish_with_the_callers_context_is_its_child(
    twin: Twin, tracer: OtelTracer, exporter: InMemorySpanExporter
) -> None:
    event = await attrs.evolve(twin, tracer=tracer).publish_event(
        "approval_decision", trace_parent=CALLER
    )
    [publish] = named(exporter, "publish ")
    assert trace_id(publish) == CALLER.trace_id
    assert publish.parent is not None and publish.parent.span_id == int(CALLER.span_id, 16)
    assert event.traceparent is not None and CALLER.trace_id in event.traceparent


async def test_an_event_published_untraced_still_carries_the_callers_context(
    twin: Twin,
) -> None:
    """Tracing off where the event is published: the caller's context travels on, for a
    traced worker to link to."""
    event = await attrs.evolve(twin, tracer=NO_TRACING).publish_event(
        "approval_decision", trace_parent=CALLER
    )
    assert event.traceparent == CALLER.traceparent


async def test_a_retried_node_is_a_failed_span_then_a_second_attempt_in_the_same_trace(
    twin: Twin, tracer: OtelTracer, exporter: InMemorySpanExporter
) -> None:
    calls = {"n": 0}

    def flaky(params: Any, ctx: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("database unavailable")
        return "ok"

    twin = attrs.evolve(twin, handlers=handler_registry(flaky=flaky))
    document = {
        "flow_id": "flaky",
        "start": "work",
        "nodes": [
            {"id": "work", "type": "task", "handler": "t:flaky", "next": "done", "retryTimes": 2},
            {"id": "done", "type": "end"},
        ],
    }
    await twin.catalog.register(Flow.from_document(document), owner=SHARED)
    traced = attrs.evolve(twin, tracer=tracer)
    await traced.start_execution("flaky", execution_id="x-2")
    first = await traced.process((await twin.queue.read("test", count=1, block_ms=1))[0].envelope)
    assert first.outcome == "retry_scheduled"
    [(retry, _)] = first.schedule
    assert (await traced.process(retry)).outcome == "completed"

    spans = node_spans(exporter, "x-2")
    summary = [
        (attribute(s, "plaita.node.id"), attribute(s, "plaita.node.attempt"), s.status.status_code)
        for s in spans
    ]
    assert summary == [
        ("work", 1, StatusCode.ERROR),
        ("work", 2, StatusCode.UNSET),
        ("done", 1, StatusCode.UNSET),
    ]
    assert attribute(spans[0], "plaita.node.outcome") == "retry_scheduled"
    assert [event.name for event in spans[0].events] == ["exception"]
    assert len({trace_id(span) for span in spans}) == 1


async def test_an_execution_stored_without_a_trace_gets_its_root_at_the_worker(
    twin: Twin, tracer: OtelTracer, exporter: InMemorySpanExporter
) -> None:
    """Started with tracing off (or stored before traces were): the first traced step gives
    it a root, stored with its checkpoint, and the later steps join it."""
    await attrs.evolve(twin, tracer=NO_TRACING).start_execution(
        "approval", params={"amount": 5000}, execution_id="x-1"
    )
    traced = attrs.evolve(twin, tracer=tracer)
    assert (await load(traced, "x-1")).trace is None
    assert await drain(traced) == ["suspended"]
    state = await load(traced, "x-1")
    assert state.trace is not None
    [root] = named(exporter, "execution ")
    assert {trace_id(span) for span in node_spans(exporter, "x-1")} == {state.trace.trace_id}
    assert trace_id(root) == state.trace.trace_id


async def test_with_tracing_off_nothing_is_stored_with_the_execution(twin: Twin) -> None:
    traced = attrs.evolve(twin, tracer=NO_TRACING)
    await traced.start_execution("approval", params={"amount": 5000}, execution_id="x-1")
    assert await drain(traced) == ["suspended"]
    event = await traced.publish_event(
        "approval_decision", data={"approved": True}, correlation_id="x-1"
    )
    assert event.traceparent is None
    await traced.filter_event(event.event_id)
    assert await drain(traced) == ["completed"]
    assert (await load(traced, "x-1")).trace is None


async def test_a_lost_lease_ends_the_node_span_interrupted(
    twin: Twin, tracer: OtelTracer, exporter: InMemorySpanExporter
) -> None:
    """An exception leaving the step (here the fence moved under the checkpoint) ends the
    open span as interrupted and failed; the carrier stays pending (W4)."""
    traced = attrs.evolve(twin, tracer=tracer)
    await traced.start_execution("approval", params={"amount": 5}, execution_id="x-1")

    class Fenced:
        """The twin's repository, whose every fenced save finds the fence moved on."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        async def save(self, state: ExecutionState, **kwargs: Any) -> None:
            from plaita.domain.errors import LeaseLostError

            if state.status is not ExecutionStatus.RUNNING or state.steps == 0:
                await self._inner.save(state, **kwargs)
                return
            raise LeaseLostError("the lease of x-1 moved on")

    fenced = attrs.evolve(twin, executions=Fenced(twin.executions), tracer=tracer)
    assert await drain(fenced) == ["lease_lost"]
    [span] = node_spans(exporter, "x-1")
    assert attribute(span, "plaita.node.outcome") == "interrupted"
    assert span.status.status_code is StatusCode.ERROR
