"""Trace contexts (C6): the W3C ``traceparent`` that ties an execution's spans into one trace.

An execution's trace is created when it is started and stored with its checkpoint
(``ExecutionTrace``): every node span of every worker that advances it has the root's context
as its parent, so one trace spans workers, restarts and resumes. A suspension records the
span that suspended the execution; the span that resumes it links to that one, and to the
context the resuming carrier brought (the publisher's, for an event).

A context that arrives from outside (an HTTP header, a stored event or checkpoint) is read
with ``TraceContext.parse``: an absent or malformed one is ignored, never an error, as the
W3C Trace Context recommendation asks of every participant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

JSON = Any

#: version - trace-id - parent-id - flags; a later version may append fields after a dash.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE_ID = "0" * 32
_ZERO_SPAN_ID = "0" * 16
#: The longest ``tracestate`` kept (W3C: 32 members; 512 characters is what vendors must
#: accept). A longer one is dropped, the ``traceparent`` kept.
MAX_TRACESTATE_CHARS = 512
#: The longest ``traceparent`` read (a future version may carry more fields).
MAX_TRACEPARENT_CHARS = 256


def parse_traceparent(value: object) -> str | None:
    """``value`` when it is a valid W3C traceparent, otherwise None (absent or malformed)."""
    if not isinstance(value, str) or len(value) > MAX_TRACEPARENT_CHARS:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE_ID or span_id == _ZERO_SPAN_ID:
        return None
    return value


@attrs.frozen
class TraceContext:
    """A span's context as it travels: a W3C ``traceparent`` and its ``tracestate``."""

    traceparent: str
    tracestate: str = ""

    @property
    def trace_id(self) -> str:
        """The 32 hex digits every span of this trace shares."""
        return self.traceparent.split("-")[1]

    @property
    def span_id(self) -> str:
        """The 16 hex digits of the span this context names."""
        return self.traceparent.split("-")[2]

    @classmethod
    def parse(cls, traceparent: object, tracestate: object = None) -> TraceContext | None:
        """The context the two headers name; None when ``traceparent`` is absent or invalid.

        A ``tracestate`` that is not text or is over ``MAX_TRACESTATE_CHARS`` is dropped.
        """
        parent = parse_traceparent(traceparent)
        if parent is None:
            return None
        state = tracestate if isinstance(tracestate, str) else ""
        if len(state) > MAX_TRACESTATE_CHARS:
            state = ""
        return cls(parent, state.strip())


@attrs.frozen
class ExecutionTrace:
    """An execution's trace, stored with its checkpoint.

    ``root`` is the context of the span recorded when the execution was started: every node
    span is its child. ``suspended_by`` is the traceparent of the node span that suspended
    the execution last, which the span resuming it links to.
    """

    root: TraceContext
    suspended_by: str | None = None

    @property
    def trace_id(self) -> str:
        return self.root.trace_id

    def suspended(self, span: TraceContext | None) -> ExecutionTrace:
        """This trace with ``span`` as the one that suspended the execution (None: kept)."""
        if span is None:
            return self
        return attrs.evolve(self, suspended_by=span.traceparent)

    def to_json(self) -> dict[str, JSON]:
        return {
            "traceparent": self.root.traceparent,
            "tracestate": self.root.tracestate,
            "suspended_by": self.suspended_by,
        }

    @classmethod
    def from_json(cls, raw: object) -> ExecutionTrace | None:
        """The stored trace; None for a checkpoint without one or with an unreadable one."""
        if not isinstance(raw, Mapping):
            return None
        root = TraceContext.parse(raw.get("traceparent"), raw.get("tracestate"))
        if root is None:
            return None
        return cls(root, parse_traceparent(raw.get("suspended_by")))


def resume_links(
    trace: ExecutionTrace | None,
    *,
    was_suspended: bool,
    carrier_traceparent: str | None,
    event: Mapping[str, JSON] | None,
) -> tuple[TraceContext, ...]:
    """What the first node span of a dispatch links to: the span that suspended the
    execution (when it was suspended), and the context its carrier brought — the producer's
    (the event filter's span), else the publisher's stored with the event."""
    links: list[TraceContext] = []
    if was_suspended and trace is not None and trace.suspended_by is not None:
        links.append(TraceContext(trace.suspended_by))
    brought = carrier_traceparent or (
        None if event is None else parse_traceparent(event.get("traceparent"))
    )
    if brought is not None:
        links.append(TraceContext(brought))
    return tuple(links)


# --- which exporters the OTEL_* environment asks for --------------------------------------

#: The exporters plaita can build (``OTEL_TRACES_EXPORTER`` values besides ``none``).
KNOWN_EXPORTERS = ("console", "otlp")
#: The OTLP protocol the installed exporter speaks.
OTLP_PROTOCOL = "http/protobuf"


@attrs.frozen
class ExporterChoice:
    """The span exporters a process builds (none: tracing is off) and what it ignored."""

    exporters: tuple[str, ...] = ()
    #: One sentence per setting that was ignored, for a warning at start-up.
    problems: tuple[str, ...] = ()
    #: The variables say nothing about traces: an application's own provider may be used.
    unset: bool = False

    @property
    def tracing(self) -> bool:
        return bool(self.exporters)


def choose_exporters(environ: Mapping[str, str]) -> ExporterChoice:
    """What the standard OpenTelemetry variables ask for.

    ``OTEL_SDK_DISABLED=true`` turns tracing off. ``OTEL_TRACES_EXPORTER`` is a comma-separated
    list of ``console``, ``otlp`` and ``none``. Unlike the SDK's own default (``otlp``), an
    unset ``OTEL_TRACES_EXPORTER`` means no tracing unless an OTLP endpoint is set
    (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``): installing the
    extra must not make every process send spans to a collector nobody configured. OTLP is
    sent over HTTP with protobuf; another ``OTEL_EXPORTER_OTLP_*PROTOCOL`` drops it. Only when
    the variables say nothing of traces (``unset``) may an application's own provider be used.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ExporterChoice()
    raw = environ.get("OTEL_TRACES_EXPORTER")
    if raw is None or not raw.strip():
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        if not endpoint:
            return ExporterChoice(unset=True)
        names = ["otlp"]
    else:
        names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    chosen: list[str] = []
    problems: list[str] = []
    for name in names:
        if name == "none" or name in chosen:
            continue
        if name not in KNOWN_EXPORTERS:
            problems.append(
                f"OTEL_TRACES_EXPORTER names {name!r}, which plaita does not build (it builds "
                f"{', '.join(KNOWN_EXPORTERS)} and none); it is ignored"
            )
            continue
        if name == "otlp":
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or OTLP_PROTOCOL
            ).strip()
            if protocol != OTLP_PROTOCOL:
                problems.append(
                    f"the OTLP protocol {protocol!r} is not supported (only {OTLP_PROTOCOL}, to "
                    "the collector's HTTP port, 4318 by default); no span is sent over OTLP"
                )
                continue
        chosen.append(name)
    return ExporterChoice(tuple(chosen), tuple(problems))
