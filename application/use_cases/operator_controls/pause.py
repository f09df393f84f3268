"""Pause: an execution takes no new step; its carriers are parked until unpaused (W23)."""

from __future__ import annotations

from plaita.application.use_cases.operator_controls.shared import (
    ControlResult,
    OneExecution,
    audit_result,
    refuse,
)
from plaita.domain.operator_controls import OperatorAction, Verdict, decide_pause


class PauseExecution(OneExecution):
    """Stop an execution taking new steps; its carriers are parked until unpaused (W23)."""

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_pause(execution_id, state.status, flags)
        if decision.verdict is Verdict.REFUSE:
            refuse(decision)
        if decision.proceeds:
            flags = await self._controls.set_flags(execution_id, paused=True)
        detail = (
            "a step already running finishes; the next carrier is parked"
            if decision.proceeds
            else decision.detail
        )
        result = ControlResult(
            execution_id, OperatorAction.PAUSE, decision.reason, state.status, flags, detail
        )
        audit_result(OperatorAction.PAUSE, result)
        return await self._recorded(OperatorAction.PAUSE, result)
