"""The tracing port (C6): the spans of an execution's trace, whatever records them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import attrs

from plaita.application.ports.span import Span
from plaita.domain.tracing import TraceContext


@attrs.frozen
class NodeRun:
    """One run of one node: what its span is named after and carries as attributes."""

    execution_id: str
    flow_id: str
    node_id: str
    node_type: str
    #: Counted across deliveries (E15): 1 for the first run, 2 for its first retry …
    attempt: int
    tenant_id: str = "default"
    #: The worker running it (its consumer name).
    worker: str = ""


class Tracer(Protocol):
    """Records spans; with tracing off the null object records nothing.

    No method raises and none waits on an exporter: spans are handed to a background
    exporter, whose failures are logged as warnings. Contexts arrive and leave as W3C
    ``TraceContext`` values (extract and inject are the adapter's).
    """

    @property
    def enabled(self) -> bool:
        """False when nothing records: no context is created, none is stored."""
        ...

    def start_execution(
        self,
        *,
        execution_id: str,
        flow_id: str,
        tenant_id: str,
        link: TraceContext | None = None,
    ) -> TraceContext | None:
        """Record an execution's root span, a new trace, and return its context to store.

        ``link``: the context of whoever started it (an incoming request), linked to; the
        ambient span of the calling code, when there is one, is linked too. None when
        nothing records.
        """
        ...

    def node(
        self, run: NodeRun, *, root: TraceContext, links: Sequence[TraceContext] = ()
    ) -> AbstractContextManager[Span]:
        """A span for one node run, child of the execution's ``root``, linked to ``links``.

        It is the current span while open (a handler's own spans become its children); an
        exception leaving it marks it interrupted and failed, and is re-raised.
        """
        ...

    def current(self) -> TraceContext | None:
        """The context of the span open in the calling task, or None when there is none.

        While a node runs that is its span, which an http node's request carries on; None
        also when nothing records."""
        ...

    def span(
        self,
        name: str,
        *,
        parent: TraceContext | None = None,
        attributes: Mapping[str, str | int] | None = None,
    ) -> AbstractContextManager[Span]:
        """A span of ``name`` (a publish, an event's filtering), child of ``parent``.

        Without ``parent`` it is a child of the ambient span, or a new trace.
        """
        ...
