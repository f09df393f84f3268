"""The worker step's spans (C6): one span per node run, a child of the execution's root.

An execution started with tracing on carries its trace in its checkpoint; one the worker meets
without (started with tracing off, or before traces were stored) gets its root here, stored
with the dispatch's first checkpoint. The first node span of a dispatch links to the span
that suspended the execution and to the context its carrier brought (an event's publisher),
so a resume is joined to what it resumed and to what resumed it.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import attrs

from plaita.application.null_objects import NoSpan
from plaita.application.ports import NodeRun, Span, Tracer
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.tracing import ExecutionTrace, TraceContext, resume_links


class StepTracing:
    def __init__(self, tracer: Tracer, *, worker: str) -> None:
        self._tracer = tracer
        self._worker = worker

    @property
    def tracer(self) -> Tracer:
        return self._tracer

    def begin(
        self, envelope: TaskEnvelope, state: ExecutionState, stored: ExecutionState | None
    ) -> tuple[ExecutionState, DispatchTrace]:
        """``state`` with its trace (a new root if it had none and tracing is on), and the
        trace of this dispatch."""
        links = resume_links(
            state.trace,
            was_suspended=stored is not None and stored.status is ExecutionStatus.SUSPENDED,
            carrier_traceparent=envelope.traceparent,
            event=envelope.event,
        )
        if state.trace is None and self._tracer.enabled:
            root = self._tracer.start_execution(
                execution_id=state.execution_id, flow_id=state.flow_id, tenant_id=state.tenant_id
            )
            if root is not None:
                state = attrs.evolve(state, trace=ExecutionTrace(root))
        return state, DispatchTrace(self._tracer, self._worker, links)


class DispatchTrace:
    """The node spans of one dispatch; the first one carries the dispatch's links."""

    def __init__(self, tracer: Tracer, worker: str, links: tuple[TraceContext, ...]) -> None:
        self._tracer = tracer
        self._worker = worker
        self._links = links

    def node(
        self, state: ExecutionState, flow: Flow, node_id: str, attempt: int
    ) -> AbstractContextManager[Span]:
        """The span of ``node_id``'s run; nothing records when the execution has no trace."""
        if state.trace is None:
            return contextlib.nullcontext(NoSpan())
        links, self._links = self._links, ()
        run = NodeRun(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            node_id=node_id,
            node_type=flow.node(node_id).type if flow.has_node(node_id) else "unknown",
            attempt=attempt,
            tenant_id=state.tenant_id,
            worker=self._worker,
        )
        return self._tracer.node(run, root=state.trace.root, links=links)


def suspended_by(state: ExecutionState, span: Span) -> ExecutionState:
    """``state`` remembering ``span`` as the one that suspended it (its resume links to it)."""
    if state.trace is None:
        return state
    return attrs.evolve(state, trace=state.trace.suspended(span.context()))
