"""A start carrier under the lease (W6): ``decide_start`` says what it means, this performs it.

A start names a new execution: it runs from the flow's start node — unless its id already
names an execution of another flow (a dead letter), or its dedup key now names another
execution (not run; the key's holder is nudged on when it has a row), or it was delivered
before and checkpointed (then it continues from the checkpoint, never from the first node).
"""

from __future__ import annotations

import logging

from plaita.application.ports import Clock, Counters
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.step.advance import Advance, Held
from plaita.application.use_cases.step.dispatch import DispatchResult, Disposition, StepSettings
from plaita.application.use_cases.step.resumes import Resumes
from plaita.domain.dedup import StartKind, StartRequest, StoredExecution, decide_start
from plaita.domain.envelope import ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.step import first_state

log = logging.getLogger("plaita.worker.step")


class Starts:
    def __init__(
        self,
        *,
        claims: DedupClaims,
        advance: Advance,
        resumes: Resumes,
        clock: Clock,
        settings: StepSettings,
    ) -> None:
        self._claims = claims
        self._advance = advance
        self._resumes = resumes
        self._clock = clock
        self._settings = settings

    async def run(
        self,
        held: Held,
        state: ExecutionState | None,
        flow: Flow | None,
        counters: Counters,
        flags: ControlFlags,
    ) -> DispatchResult:
        """Start ``flow`` (looked up for a carrier whose execution has no row yet) or continue
        the execution ``state`` the carrier already started."""
        envelope = held.envelope
        request = StartRequest(envelope.execution_id, envelope.flow_id, envelope.dedup_key)
        stored = None if state is None else StoredExecution(state.flow_id, state.status)
        start = decide_start(request, stored)
        if start.kind is StartKind.ID_CONFLICT:
            return DispatchResult(Disposition.DEAD_LETTER, start.kind.value, start.detail)
        if start.kind is StartKind.CLAIM_DEDUP_KEY:
            deduplicated = await self._claim_dedup_key(request, envelope.tenant_id)
            if deduplicated is not None:
                return deduplicated
        if state is not None:
            # W6: a redelivered start continues from the checkpoint, never from the first node.
            return await self._resumes.run(held, state, ResumeType.CONTINUE, counters, flags)
        assert flow is not None, "a start without a row has its flow looked up"
        return await self._advance.run(
            held, self._new_state(envelope, flow), flow, resume=None, counters=counters, stored=None
        )

    def _new_state(self, envelope: TaskEnvelope, flow: Flow) -> ExecutionState:
        now_ms = self._clock.now_ms()
        return first_state(envelope, flow, now_ms=now_ms, status=ExecutionStatus.RUNNING)

    async def _claim_dedup_key(
        self, request: StartRequest, tenant_id: str
    ) -> DispatchResult | None:
        """W6 at the worker: start only while the key names this execution (or nobody).

        The key was claimed when the start was accepted; it can name another execution now
        only if this claim was released as an orphan and claimed again by a later start of
        the same request — that one runs, this one does not.
        """
        claimed = await self._claims.claim(request, tenant_id=tenant_id)
        decision = claimed.decision
        if decision.kind is StartKind.NEW_START:
            return None
        log.info(
            "event=start.deduplicated execution_id=%s dedup_key=%r holder=%s decision=%s: %s; "
            "this start is not run",
            request.execution_id,
            request.dedup_key,
            decision.execution_id,
            decision.kind.value,
            decision.detail,
        )
        follow_ups: tuple[TaskEnvelope, ...] = ()
        if decision.kind is StartKind.ENQUEUE_CONTINUE:
            follow_ups = (
                TaskEnvelope.resume(
                    execution_id=decision.execution_id,
                    flow_id=claimed.holder_flow_id or request.flow_id,
                    resume_type=ResumeType.CONTINUE,
                    now_ms=self._clock.now_ms(),
                    tenant_id=tenant_id,
                    generations=self._settings.generations,
                ),
            )
        return DispatchResult(Disposition.ACK, "deduplicated", decision.detail, enqueue=follow_ups)
