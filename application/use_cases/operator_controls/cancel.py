"""Cancel: flag it, then enqueue the cancel carrier the worker performs under the lease (W23)."""

from __future__ import annotations

from plaita.application.use_cases.operator_controls.shared import (
    ControlResult,
    WithQueue,
    audit_result,
    refuse,
)
from plaita.domain.envelope import ResumeType
from plaita.domain.operator_controls import OperatorAction, decide_cancel


class CancelExecution(WithQueue):
    """Flag the cancel, then enqueue the cancel carrier the worker performs under the lease.

    The flag makes any other carrier of the execution cancel it too (W7 row 8), should the
    cancel carrier be lost or overtaken; a cancel carrier is never parked.
    """

    async def __call__(self, execution_id: str) -> ControlResult:
        state, flags = await self._load(execution_id)
        decision = decide_cancel(execution_id, state.status, flags)
        if not decision.proceeds:
            refuse(decision)
        flags = await self._controls.set_flags(execution_id, cancel_requested=True)
        await self._queue.enqueue(self._carrier(state, ResumeType.CANCEL))
        result = ControlResult(
            execution_id,
            OperatorAction.CANCEL,
            decision.reason,
            state.status,
            flags,
            "the worker cancels it under the lease at its next dispatch",
        )
        audit_result(OperatorAction.CANCEL, result)
        return await self._recorded(OperatorAction.CANCEL, result)
