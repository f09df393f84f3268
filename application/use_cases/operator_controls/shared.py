"""What every operator action shares: its result, its refusals, its audit line, and loading
the execution with its flags (W23).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from plaita.application.actor import current_actor
from plaita.application.ports import Clock, ExecutionControls, ExecutionRepository, TaskQueue
from plaita.application.use_cases.executions import GetExecution, append_history_best_effort
from plaita.domain import history
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import ExecutionRunningError, OperatorActionRefusedError, UnknownNodeError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.operator_controls import (
    ActionDecision,
    ControlFlags,
    OperatorAction,
    RetryDecision,
    Verdict,
)

JSON = Any
audit = logging.getLogger("plaita.audit")


@attrs.frozen
class ControlResult:
    """What one operator action did to one execution."""

    execution_id: str
    action: OperatorAction
    #: paused, already_paused, unpaused, not_paused, cancel_requested, continue_enqueued,
    #: wake_up_enqueued or restarted.
    outcome: str
    #: The status as this action left it (a carrier it enqueued may change it next).
    status: ExecutionStatus
    flags: ControlFlags
    detail: str = ""
    #: Parked carriers enqueued again (unpause).
    requeued: int = 0
    #: The node a retry restarts at (None for a W7 wake-up: the worker picks the failed node).
    node_id: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "execution_id": self.execution_id,
            "action": self.action.value,
            "outcome": self.outcome,
            "status": self.status.value,
            "paused": self.flags.paused,
            "cancel_requested": self.flags.cancel_requested,
            "parked": self.flags.parked,
            "detail": self.detail,
            "requeued": self.requeued,
            "node_id": self.node_id,
        }


def refuse(decision: ActionDecision | RetryDecision) -> None:
    if decision.verdict is Verdict.CONFLICT:
        raise ExecutionRunningError(decision.detail)
    if decision.reason == "unknown_node":
        raise UnknownNodeError(decision.detail)
    raise OperatorActionRefusedError(decision.detail)


def audit_result(action: OperatorAction, result: ControlResult) -> None:
    audit.info(
        "event=execution.%s execution_id=%s outcome=%s status=%s paused=%s cancel_requested=%s "
        "requeued=%d node_id=%s",
        action.value,
        result.execution_id,
        result.outcome,
        result.status.value,
        result.flags.paused,
        result.flags.cancel_requested,
        result.requeued,
        result.node_id,
    )


class OneExecution:
    """Loads the execution (``UnknownExecutionError`` when there is none) and its flags."""

    def __init__(
        self, *, executions: ExecutionRepository, controls: ExecutionControls, clock: Clock
    ) -> None:
        self._executions = executions
        self._get = GetExecution(executions)
        self._controls = controls
        self._clock = clock

    async def _load(self, execution_id: str) -> tuple[ExecutionState, ControlFlags]:
        state = await self._get(execution_id)
        return state, await self._controls.get(execution_id)

    async def _recorded(self, action: OperatorAction, result: ControlResult) -> ControlResult:
        """Record the action in the execution's history (after its ``audit_result`` line):
        who asked (the scope's actor), what, and what came of it. Best effort — the action
        took effect whatever happens to the entry — and a failure to write it is logged."""
        actor = current_actor()
        entry = history.operator_action(
            self._clock.now_ms(),
            who=str(actor),
            action=action.value,
            detail={"outcome": result.outcome, "node_id": result.node_id}
            if result.node_id
            else {"outcome": result.outcome},
        )
        await append_history_best_effort(self._executions, result.execution_id, entry)
        return result


class WithQueue(OneExecution):
    """An operator action that writes carriers, stamped with this process's generations (W12)."""

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        controls: ExecutionControls,
        queue: TaskQueue,
        clock: Clock,
        generations: CarrierGenerations,
    ) -> None:
        super().__init__(executions=executions, controls=controls, clock=clock)
        self._queue = queue
        self._generations = generations

    def _carrier(self, state: ExecutionState, resume_type: ResumeType) -> TaskEnvelope:
        return TaskEnvelope.resume(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            resume_type=resume_type,
            now_ms=self._clock.now_ms(),
            tenant_id=state.tenant_id,
            generations=self._generations,
        )


def parked_note(flags: ControlFlags) -> str:
    if not flags.paused:
        return ""
    return "; the execution is paused, so the carrier waits parked until unpause"
