"""Start an execution: check the ids, the input's limits and that the flow exists, claim the
dedup key, store the ``pending`` state (ADR 0022), enqueue the start carrier (addressed to
one worker instance when the start names a target, W25; on its priority's stream)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plaita.application.actor import current_actor
from plaita.application.codec import ENVELOPE_FIELD, encode_envelope
from plaita.application.null_objects import NO_TRACING
from plaita.application.ports import Clock, ExecutionRepository, IdGenerator, TaskQueue, Tracer
from plaita.application.tenancy import current_tenant
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain import history
from plaita.domain.dedup import StartKind, StartRequest
from plaita.domain.envelope import (
    CarrierGenerations,
    ResumeType,
    TaskEnvelope,
    validate_target_instance_id,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus, ParentLink
from plaita.domain.ids import validate_execution_id, validate_flow_id
from plaita.domain.limits import ENVELOPE_LIMIT, INPUT_LIMIT, check_json_text, check_json_value
from plaita.domain.priorities import Priority, parse_priority
from plaita.domain.step import first_state
from plaita.domain.tenancy import check_same_tenant
from plaita.domain.tracing import ExecutionTrace, TraceContext

JSON = Any


@attrs.frozen
class StartedExecution:
    execution_id: str
    flow_id: str
    version: str
    deduplicated: bool = False


class StartExecution:
    def __init__(
        self,
        *,
        flows: FlowCatalog,
        queue: TaskQueue,
        claims: DedupClaims,
        executions: ExecutionRepository,
        clock: Clock,
        ids: IdGenerator,
        generations: CarrierGenerations,
        tracer: Tracer = NO_TRACING,
    ) -> None:
        self._tracer = tracer
        self._flows = flows
        self._executions = executions
        self._generations = generations
        self._queue = queue
        self._claims = claims
        self._clock = clock
        self._ids = ids

    async def __call__(
        self,
        flow_id: str,
        *,
        version: str | None = None,
        params: Mapping[str, JSON] | None = None,
        execution_id: str | None = None,
        dedup_key: str | None = None,
        tenant_id: str = "default",
        trace_link: TraceContext | None = None,
        target_instance_id: str | None = None,
        parent: ParentLink | None = None,
        priority: Priority | str = Priority.NORMAL,
    ) -> StartedExecution:
        """Accept a start of ``flow_id``; ``trace_link`` is the caller's trace context (an
        incoming request's), which the execution's new trace links to (C6); ``parent`` the
        execution whose subflow or map node starts it as a child (E13, E14); ``priority``
        (``high``, ``normal``, ``low``; ``InvalidPriorityError`` otherwise) which of the
        queue's streams its start carrier waits on."""
        validate_flow_id(flow_id)
        priority = parse_priority(priority)
        if execution_id is not None:
            validate_execution_id(execution_id)
        if target_instance_id is not None:
            validate_target_instance_id(target_instance_id)
        check_json_value(params or {}, INPUT_LIMIT, field="input")
        # The flow is looked up for the scope's tenant (W24): it must be the one started for.
        check_same_tenant(tenant_id, current_tenant(), f"the start of {flow_id!r}")
        flow = await self._flows.get(flow_id, version)
        execution_id = execution_id or self._ids.new_id()
        envelope = TaskEnvelope.start(
            execution_id=execution_id,
            flow_id=flow.flow_id,
            version=flow.version,
            params=params or {},
            now_ms=self._clock.now_ms(),
            tenant_id=tenant_id,
            dedup_key=dedup_key,
            generations=self._generations,
            target_instance_id=target_instance_id,
            priority=priority,
        )
        # What the worker will check, checked here: an accepted start is never dead-lettered
        # for its size (a long dedup key or version on top of a large input).
        check_json_text(encode_envelope(envelope)[ENVELOPE_FIELD], ENVELOPE_LIMIT, field="start")
        request = StartRequest(execution_id, flow.flow_id, dedup_key)
        if dedup_key is not None:
            # W6: claimed before any carrier exists, so a retried start never runs twice.
            claimed = await self._claims.claim(request, tenant_id=tenant_id)
            decision = claimed.decision
            if decision.kind is StartKind.ID_CONFLICT:
                assert decision.error is not None
                raise decision.error
            if decision.kind is StartKind.ENQUEUE_CONTINUE:
                # The key's execution runs but may have lost its carrier (D5): a continue is
                # harmless if it did not, and moves it on if it did.
                await self._queue.enqueue(
                    TaskEnvelope.resume(
                        execution_id=decision.execution_id,
                        flow_id=claimed.holder_flow_id or flow.flow_id,
                        resume_type=ResumeType.CONTINUE,
                        now_ms=self._clock.now_ms(),
                        tenant_id=tenant_id,
                        generations=self._generations,
                    )
                )
            if decision.kind is not StartKind.NEW_START:
                return StartedExecution(
                    decision.execution_id, flow.flow_id, flow.version, deduplicated=True
                )
        # ADR 0022: the execution exists from here on, before any worker saw its carrier. An
        # id that names a stored execution already is left to the carrier (W6).
        accepted = attrs.evolve(
            first_state(
                envelope, flow, now_ms=envelope.timestamp_ms, status=ExecutionStatus.PENDING
            ),
            parent=parent,
        )
        await self._executions.accept(
            self._traced(accepted, trace_link), history=[_accepted(envelope, params or {})]
        )
        await self._queue.enqueue(envelope)
        if dedup_key is not None:
            await self._claims.confirm(request, tenant_id=tenant_id)
        return StartedExecution(execution_id, flow.flow_id, flow.version)

    def _traced(self, state: ExecutionState, link: TraceContext | None) -> ExecutionState:
        """``state`` with its new trace, created now so every step joins it (C6)."""
        root = self._tracer.start_execution(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            tenant_id=state.tenant_id,
            link=link,
        )
        return state if root is None else attrs.evolve(state, trace=ExecutionTrace(root))


def _accepted(envelope: TaskEnvelope, params: Mapping[str, JSON]) -> history.HistoryEntry:
    actor = current_actor()
    return history.accepted(
        envelope.timestamp_ms,
        input_size=history.json_size(params),
        via=actor.via,
        by=actor.name,
        dedup_key=envelope.dedup_key,
        target=envelope.target_instance_id,
        priority=None if envelope.priority is Priority.NORMAL else envelope.priority.value,
    )
