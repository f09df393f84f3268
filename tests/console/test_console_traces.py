"""The console's publish joins the caller's trace (C6): a W3C ``traceparent`` header makes the
publish span its child, the event carries the context on, and the step it resumes links to
it — with the production worker and event filter on the memory twin."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from dependency_injector import providers
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plaita.adapters.otel.tracer import OtelTracer
from plaita.application.tenancy import tenant_scope
from plaita.entrypoints.container import Container

from .conftest import auth, register_approval, running_services, start, wait_for

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exporter(container: Container) -> Iterator[InMemorySpanExporter]:
    """The container's tracer, overridden: the SDK into an in-memory exporter."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    container.tracer.override(providers.Object(OtelTracer(provider)))
    yield spans
    container.tracer.reset_override()
    provider.shutdown()


def hex_span(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


async def publish(client: httpx.AsyncClient, execution_id: str, **headers: str) -> str:
    answer = await client.post(
        "/api/v1/events",
        json={
            "event_type": "approval_decision",
            "correlation_id": execution_id,
            "data": {"approved": True},
        },
        headers={**auth("operator"), **headers},
    )
    assert answer.status_code == 201, answer.text
    event_id: str = answer.json()["event_id"]
    return event_id


async def test_a_publish_with_a_traceparent_is_the_callers_child_and_the_resume_links_to_it(
    container: Container, exporter: InMemorySpanExporter, client: httpx.AsyncClient
) -> None:
    await register_approval(client)
    async with running_services(container):
        execution_id = await start(client, 5000)
        await wait_for(client, execution_id, {"suspended"})
        await publish(client, execution_id, traceparent=CALLER, tracestate="vendor=1")
        await wait_for(client, execution_id, {"completed"})

    [publish_span] = [s for s in exporter.get_finished_spans() if s.name.startswith("publish")]
    assert hex_span(publish_span)[0] == CALLER.split("-")[1]
    assert publish_span.parent is not None
    assert f"{publish_span.parent.span_id:016x}" == CALLER.split("-")[2]
    [filtered] = [s for s in exporter.get_finished_spans() if s.name.startswith("filter")]
    assert hex_span(filtered)[0] == hex_span(publish_span)[0]

    nodes = [
        s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("plaita.execution.id") == execution_id
        and "plaita.node.id" in (s.attributes or {})
    ]
    assert len({hex_span(s)[0] for s in nodes}) == 1
    [resumed] = [s for s in nodes if s.links]
    assert (resumed.attributes or {})["plaita.node.id"] == "wait_decision"
    linked = {(f"{k.context.trace_id:032x}", f"{k.context.span_id:016x}") for k in resumed.links}
    assert hex_span(filtered) in linked


@pytest.mark.parametrize(
    ("headers", "carried"),
    [
        ({"traceparent": CALLER}, CALLER),
        ({"traceparent": "not-a-traceparent"}, None),
        ({}, None),
    ],
)
async def test_with_tracing_off_the_event_carries_the_callers_context_as_it_came(
    container: Container,
    client: httpx.AsyncClient,
    headers: dict[str, str],
    carried: str | None,
) -> None:
    """A malformed header is ignored (W3C), never an error."""
    event_id = await publish(client, "x-1", **headers)
    with tenant_scope("default"):
        event = await container.events().get(event_id)
    assert event is not None and event.traceparent == carried
