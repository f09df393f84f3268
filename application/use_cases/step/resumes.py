"""A resume carrier under the lease (W7): ``decide_resume`` says what it means, this performs
it — ack at once (terminal, already suspended, refused, not this wait), cancel, fail on a
breaking definition change, wake an execution in error up, or advance from the checkpoint.
"""

from __future__ import annotations

import logging

from plaita.application.engine.strategies import ResumeInput
from plaita.application.ports import Clock, Counters, CounterStore
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.step.advance import Advance, Held
from plaita.application.use_cases.step.attempts import COUNTER_TTL_MS
from plaita.application.use_cases.step.dispatch import DispatchResult, ack
from plaita.application.use_cases.step.waits import WaitRegistrar
from plaita.domain import history
from plaita.domain.envelope import ResumeType, TaskEnvelope
from plaita.domain.errors import FlowDefinitionError, UnknownFlowError
from plaita.domain.execution import ExecutionState, ExecutionStatus, Suspension
from plaita.domain.flow import Flow
from plaita.domain.history import HistoryEntry
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.resume import (
    CurrentDefinition,
    ExecutionView,
    ResumeDecision,
    ResumeKind,
    ResumeRequest,
    decide_resume,
)

log = logging.getLogger("plaita.worker.step")


class Resumes:
    def __init__(
        self,
        *,
        flows: FlowCatalog,
        counters: CounterStore,
        waits: WaitRegistrar,
        advance: Advance,
        clock: Clock,
    ) -> None:
        self._flows = flows
        self._counters = counters
        self._waits = waits
        self._advance = advance
        self._clock = clock

    async def run(
        self,
        held: Held,
        state: ExecutionState,
        kind: ResumeType,
        counters: Counters,
        flags: ControlFlags,
    ) -> DispatchResult:
        try:
            flow = await self._flows.get(state.flow_id, state.flow_version)
        except UnknownFlowError as exc:
            return await held.writes.fail(state, exc, previous=state)
        decision = decide_resume(
            ExecutionView.of(
                state,
                subgraph_fingerprint=state.subgraph_fingerprint,
                g1_wakeups=counters.wakeups,
                consecutive_failures=counters.no_fail,
                cancel_requested=flags.cancel_requested,
            ),
            ResumeRequest(
                kind,
                subscription_id=held.envelope.subscription_id,
                event_id=event_id_of(held.envelope),
                child_index=child_index_of(held.envelope),
            ),
            _deployed(flow, state),
        )
        if decision.log_warning:
            log.warning("%s", decision.log_warning)
        return await self._perform(held, state, flow, decision, counters)

    async def _perform(
        self,
        held: Held,
        state: ExecutionState,
        flow: Flow,
        decision: ResumeDecision,
        counters: Counters,
    ) -> DispatchResult:
        if decision.ack:
            if decision.kind in (ResumeKind.PROTOCOL_ERROR, ResumeKind.REFUSE):
                log.warning("event=resume.%s %s", decision.reason.value, decision.detail)
            return ack(decision.reason.value, decision.detail)
        if decision.kind is ResumeKind.CANCEL:
            return await held.writes.cancel(state)
        if decision.kind is ResumeKind.DEFINITION_DRIFT:
            drift = decision.error or FlowDefinitionError(decision.detail)
            return await held.writes.fail(state, drift, previous=state)
        if decision.kind is ResumeKind.WAKE_UP:
            woken_counters = await self._counters.apply(
                state.execution_id, decision.counter_changes, ttl_ms=COUNTER_TTL_MS
            )
            awake = state.transition(
                ExecutionStatus.RUNNING,
                now_ms=self._clock.now_ms(),
                error=None,
                next_node_id=decision.restart_node_id,
            )
            return await self._advance.run(
                held, awake, flow, resume=None, counters=woken_counters, stored=state
            )
        resume, at = None, None
        woken = _woken_wait(held.envelope, state)
        if decision.kind is ResumeKind.PROCEED and woken is not None:
            taken_by = await self._taken_by(held.envelope, state)
            if taken_by is not None:
                # V6: an earlier wait of this execution already took this event.
                return ack(
                    "event_already_taken",
                    f"event {event_id_of(held.envelope)} was taken by subscription {taken_by}",
                )
            envelope = held.envelope
            assert envelope.resume_type is not None
            resume = ResumeInput(
                envelope.resume_type, envelope.event, envelope.subscription_id, woken
            )
            at = woken.node_id
        lead = self._woken_by(held, woken) if woken is not None and resume is not None else ()
        return await self._advance.run(
            held, state, flow, resume=resume, counters=counters, stored=state, lead=lead, at=at
        )

    def _woken_by(self, held: Held, woken: Suspension) -> tuple[HistoryEntry, ...]:
        """The history of what resumed a wait: its event, or its timer."""
        envelope = held.envelope
        node_id = woken.node_id
        now_ms = self._clock.now_ms()
        if envelope.resume_type is ResumeType.EVENT:
            event = envelope.event or {}
            event_type = event.get("event_type")
            return (
                history.event_received(
                    now_ms,
                    node_id=node_id,
                    worker=held.writes.worker,
                    event_id=event_id_of(envelope),
                    event_type=event_type if isinstance(event_type, str) else None,
                    via=envelope.origin,
                ),
            )
        if envelope.resume_type is ResumeType.TIMEOUT:
            return (history.timer_fired(now_ms, node_id=node_id, worker=held.writes.worker),)
        return ()

    async def _taken_by(self, envelope: TaskEnvelope, state: ExecutionState) -> str | None:
        if envelope.resume_type is not ResumeType.EVENT or envelope.subscription_id is None:
            return None
        return await self._waits.take_for_resume(
            state.execution_id, state.tenant_id, envelope.event, envelope.subscription_id
        )


def _woken_wait(envelope: TaskEnvelope, state: ExecutionState) -> Suspension | None:
    """The wait a resume carrier wakes: the suspension of a suspended execution, or the
    branch wait its subscription names while another branch runs (E12); None for any other
    carrier."""
    kind = envelope.resume_type
    if kind not in (ResumeType.EVENT, ResumeType.TIMEOUT, ResumeType.CHILD):
        return None
    named = state.wait_of(envelope.subscription_id)
    if named is not None:
        return named
    return state.suspension if state.status is ExecutionStatus.SUSPENDED else None


def _deployed(flow: Flow, state: ExecutionState) -> CurrentDefinition:
    node_id = state.suspension.node_id if state.suspension else state.next_node_id
    return CurrentDefinition(
        flow.fingerprint,
        flow.subgraph_fingerprint(node_id) if node_id and flow.has_node(node_id) else None,
        start_node_id=flow.start_node.id,
    )


def child_index_of(envelope: TaskEnvelope) -> int | None:
    """The map item a ``child`` carrier names (E14); None for any other carrier."""
    if envelope.resume_type is not ResumeType.CHILD or envelope.event is None:
        return None
    index = envelope.event.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def event_id_of(envelope: TaskEnvelope) -> str | None:
    event = envelope.event
    return None if event is None else event.get("event_id")
