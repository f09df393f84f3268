"""Trace contexts (C6): W3C traceparent reading, the stored trace, resume links and the
exporters the OTEL_* variables ask for — one test per row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.events import Event
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.tracing import (
    MAX_TRACESTATE_CHARS,
    ExecutionTrace,
    ExporterChoice,
    TraceContext,
    choose_exporters,
    parse_traceparent,
    resume_links,
)

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (VALID, True),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", True),  # not sampled
        # A later version may append fields; version 00 may not.
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what", True),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", False),
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("00-00000000000000000000000000000000-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", False),
        ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01", False),
        ("not a traceparent", False),
        ("", False),
        (None, False),
        (42, False),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-" + "x" * 300, False),
    ],
)
def test_parse_traceparent(value: object, valid: bool) -> None:
    assert parse_traceparent(value) == (value if valid else None)


@given(st.text(max_size=80))
def test_parse_traceparent_never_raises_and_keeps_only_what_it_read(value: str) -> None:
    assert parse_traceparent(value) in (None, value)


def test_a_context_names_its_trace_and_span() -> None:
    context = TraceContext(VALID)
    assert (context.trace_id, context.span_id) == (
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )


@pytest.mark.parametrize(
    ("tracestate", "kept"),
    [
        ("vendor=abc", "vendor=abc"),
        (" vendor=abc ", "vendor=abc"),
        (None, ""),
        (7, ""),
        ("x" * (MAX_TRACESTATE_CHARS + 1), ""),
    ],
)
def test_a_parsed_context_keeps_a_readable_tracestate(tracestate: object, kept: str) -> None:
    assert TraceContext.parse(VALID, tracestate) == TraceContext(VALID, kept)


def test_a_context_without_a_valid_traceparent_is_none() -> None:
    assert TraceContext.parse("garbage", "vendor=abc") is None


def test_the_stored_trace_round_trips_and_remembers_what_suspended_it() -> None:
    trace = ExecutionTrace(TraceContext(VALID, "v=1"))
    suspended = trace.suspended(TraceContext(OTHER))
    assert suspended.suspended_by == OTHER and suspended.trace_id == trace.trace_id
    assert trace.suspended(None) is trace
    assert ExecutionTrace.from_json(suspended.to_json()) == suspended


@pytest.mark.parametrize(
    "raw",
    [None, "text", [], {}, {"traceparent": "garbage"}, {"tracestate": "v=1"}],
)
def test_an_unreadable_stored_trace_reads_as_none(raw: object) -> None:
    assert ExecutionTrace.from_json(raw) is None


def test_a_stored_trace_with_an_unreadable_suspension_keeps_its_root() -> None:
    read = ExecutionTrace.from_json({"traceparent": VALID, "suspended_by": "garbage"})
    assert read == ExecutionTrace(TraceContext(VALID, ""))


def state(**changes: object) -> ExecutionState:
    base = ExecutionState.new(
        execution_id="x-1",
        flow_id="f",
        flow_version="1",
        fingerprint="fp",
        start_node_id="a",
        input={},
        now_ms=1,
    )
    return ExecutionState.from_json({**base.to_json(), **changes})


def test_a_state_stored_before_traces_has_none() -> None:
    raw = state().to_json()
    del raw["trace"]
    assert ExecutionState.from_json(raw).trace is None


def test_a_state_keeps_its_trace_through_json() -> None:
    traced = state(trace={"traceparent": VALID, "tracestate": "", "suspended_by": OTHER})
    assert traced.trace == ExecutionTrace(TraceContext(VALID), OTHER)
    assert ExecutionState.from_json(traced.to_json()) == traced
    moved = traced.transition(ExecutionStatus.SUSPENDED, now_ms=2)
    assert moved.trace == traced.trace


def test_an_event_carries_its_publishers_context_only_when_it_has_one() -> None:
    plain = Event(event_id="e-1", event_type="t", timestamp_ms=1)
    assert "traceparent" not in plain.to_json()
    traced = Event(event_id="e-1", event_type="t", timestamp_ms=1, traceparent=VALID)
    assert Event.from_json(traced.to_json()) == traced
    assert Event.from_json({**plain.to_json(), "traceparent": "garbage"}).traceparent is None


SUSPENDED_BY = ExecutionTrace(TraceContext(VALID), OTHER)
FILTER = "00-11111111111111111111111111111111-2222222222222222-01"
PUBLISHER = "00-33333333333333333333333333333333-4444444444444444-01"


@pytest.mark.parametrize(
    ("trace", "was_suspended", "carrier", "event", "links"),
    [
        # An event's resume: the suspending span, then the filter's span.
        (SUSPENDED_BY, True, FILTER, {"traceparent": PUBLISHER}, (OTHER, FILTER)),
        # The filter traced nothing: the publisher's context stored with the event.
        (SUSPENDED_BY, True, None, {"traceparent": PUBLISHER}, (OTHER, PUBLISHER)),
        (SUSPENDED_BY, True, None, {"traceparent": "garbage"}, (OTHER,)),
        # A timer's resume: only the suspending span.
        (SUSPENDED_BY, True, None, None, (OTHER,)),
        # Not resuming a suspension (a retry, a hand-over): no link to an old suspension.
        (SUSPENDED_BY, False, None, None, ()),
        (ExecutionTrace(TraceContext(VALID)), True, None, None, ()),
        # An execution without a trace still links to what brought its carrier.
        (None, True, FILTER, None, (FILTER,)),
    ],
)
def test_resume_links(
    trace: ExecutionTrace | None,
    was_suspended: bool,
    carrier: str | None,
    event: dict[str, object] | None,
    links: tuple[str, ...],
) -> None:
    found = resume_links(
        trace, was_suspended=was_suspended, carrier_traceparent=carrier, event=event
    )
    assert tuple(link.traceparent for link in found) == links


@pytest.mark.parametrize(
    ("environ", "exporters", "problems"),
    [
        ({}, (), 0),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",), 0),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ("otlp",), 0),
        ({"OTEL_TRACES_EXPORTER": " OTLP , console,otlp"}, ("otlp", "console"), 0),
        ({"OTEL_TRACES_EXPORTER": "none"}, (), 0),
        ({"OTEL_TRACES_EXPORTER": "none,console"}, ("console",), 0),
        ({"OTEL_TRACES_EXPORTER": "   "}, (), 0),
        ({"OTEL_TRACES_EXPORTER": "jaeger,console"}, ("console",), 1),
        # Unset exporter, but an endpoint: the SDK's default, otlp.
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("otlp",), 0),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",), 0),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, (), 0),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, (), 0),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "console"}, (), 0),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "console"}, ("console",), 0),
        # Only http/protobuf is spoken; a trace-specific protocol wins over the general one.
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, (), 1),
        (
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            ("otlp",),
            0,
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            ("console",),
            1,
        ),
    ],
)
def test_choose_exporters(
    environ: dict[str, str], exporters: tuple[str, ...], problems: int
) -> None:
    choice = choose_exporters(environ)
    assert choice.exporters == exporters
    assert len(choice.problems) == problems
    assert choice.tracing is bool(exporters)
    silent = not environ.get("OTEL_SDK_DISABLED") and not any(
        environ.get(name, "").strip()
        for name in (
            "OTEL_TRACES_EXPORTER",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        )
    )
    assert choice.unset is silent


def test_an_ignored_exporter_is_named_in_its_problem() -> None:
    [problem] = choose_exporters({"OTEL_TRACES_EXPORTER": "jaeger"}).problems
    assert "'jaeger'" in problem and "console, otlp" in problem
    assert choose_exporters({"OTEL_TRACES_EXPORTER": "jaeger"}) == ExporterChoice((), (problem,))
