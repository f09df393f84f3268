"""The operator's "resume": a continue carrier for a running execution (W23, W19)."""

from __future__ import annotations

from plaita.application.use_cases.operator_controls.shared import (
    ControlResult,
    WithQueue,
    audit_result,
    parked_note,
    refuse,
)
from plaita.domain.envelope import ResumeType
from plaita.domain.operator_controls import OperatorAction, decide_resume_request


class ContinueExecution(WithQueue):
    """The operator's "resume": a continue carrier for a running execution whose worker went
    away; a suspended one is refused (``plaita.domain.operator_actions``): its event or timer
    moves it."""

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_resume_request(execution_id, state.status, flags)
        if not decision.proceeds:
            refuse(decision)
        await self._queue.enqueue(self._carrier(state, ResumeType.CONTINUE))
        detail = "continues from its checkpoint"
        result = ControlResult(
            execution_id,
            OperatorAction.RESUME,
            decision.reason,
            state.status,
            flags,
            detail + parked_note(flags),
        )
        audit_result(OperatorAction.RESUME, result)
        return await self._recorded(OperatorAction.RESUME, result)
