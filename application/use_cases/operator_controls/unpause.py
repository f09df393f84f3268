"""Unpause: clear the pause and give back every parked carrier (W23, I0)."""

from __future__ import annotations

from plaita.application.ports import (
    Clock,
    DelayQueue,
    ExecutionControls,
    ExecutionRepository,
    TaskQueue,
)
from plaita.application.use_cases.operator_controls.shared import (
    ControlResult,
    WithQueue,
    audit_result,
)
from plaita.domain.envelope import CarrierGenerations, ResumeType
from plaita.domain.operator_controls import OperatorAction, decide_unpause

#: How long after an unpause its safety-net continue fires (see UnpauseExecution).
UNPAUSE_SAFETY_NET_MS = 60_000


class UnpauseExecution(WithQueue):
    """Clear the pause and give back every parked carrier, or a continue when none (W23, I0).

    Order: a delayed safety-net continue when carriers are parked, then the flag is cleared
    (the park is atomic with the flag read, so nothing is parked after this), then each
    parked carrier is enqueued again and only then forgotten. Stopping half-way leaves
    either a paused execution (run unpause again) or parked carriers of an unpaused one,
    which the safety net's carrier makes the worker enqueue (ADR 0008).
    """

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        controls: ExecutionControls,
        queue: TaskQueue,
        delay: DelayQueue,
        clock: Clock,
        generations: CarrierGenerations,
        safety_net_ms: int = UNPAUSE_SAFETY_NET_MS,
    ) -> None:
        super().__init__(
            executions=executions,
            controls=controls,
            queue=queue,
            clock=clock,
            generations=generations,
        )
        self._delay = delay
        self._safety_net_ms = safety_net_ms

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_unpause(execution_id, state.status, flags)
        if not decision.proceeds:
            result = ControlResult(
                execution_id,
                OperatorAction.UNPAUSE,
                decision.reason,
                state.status,
                flags,
                decision.detail,
            )
            audit_result(OperatorAction.UNPAUSE, result)
            return await self._recorded(OperatorAction.UNPAUSE, result)
        live = not state.status.is_terminal
        if live and flags.parked:
            due = self._clock.now_ms() + self._safety_net_ms
            await self._delay.schedule(self._carrier(state, ResumeType.CONTINUE), due_ms=due)
        await self._controls.set_flags(execution_id, paused=False)
        carriers = await self._controls.parked(execution_id)
        for carrier in carriers:
            await self._queue.enqueue(carrier.envelope)
        await self._controls.unpark(execution_id, [carrier.carrier_id for carrier in carriers])
        detail = f"{len(carriers)} parked carrier(s) enqueued again"
        if not carriers and live:
            await self._queue.enqueue(self._carrier(state, ResumeType.CONTINUE))
            detail = "no carrier was parked; a continue was enqueued"
        result = ControlResult(
            execution_id,
            OperatorAction.UNPAUSE,
            decision.reason,
            state.status,
            await self._controls.get(execution_id),
            detail,
            requeued=len(carriers),
        )
        audit_result(OperatorAction.UNPAUSE, result)
        return await self._recorded(OperatorAction.UNPAUSE, result)
