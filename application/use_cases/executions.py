"""Queries and operator requests on executions: show, resume."""

from __future__ import annotations

from plaita.application.ports import Clock, ExecutionRepository, TaskQueue
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import UnknownExecutionError
from plaita.domain.execution import ExecutionState


class GetExecution:
    def __init__(self, executions: ExecutionRepository) -> None:
        self._executions = executions

    async def __call__(self, execution_id: str) -> ExecutionState:
        state = await self._executions.load(execution_id)
        if state is None:
            raise UnknownExecutionError(
                f"execution {execution_id!r} does not exist (if it was just started, its start "
                "carrier may still be queued: is a worker running?)"
            )
        return state


class ResumeExecution:
    """Enqueue a resume carrier (continue, retry or cancel) for an existing execution (W7)."""

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        queue: TaskQueue,
        clock: Clock,
        generations: CarrierGenerations,
    ) -> None:
        self._get = GetExecution(executions)
        self._generations = generations
        self._queue = queue
        self._clock = clock

    async def __call__(self, execution_id: str, resume_type: ResumeType) -> ExecutionState:
        state = await self._get(execution_id)
        await self._queue.enqueue(
            TaskEnvelope.resume(
                execution_id=state.execution_id,
                flow_id=state.flow_id,
                resume_type=resume_type,
                now_ms=self._clock.now_ms(),
                tenant_id=state.tenant_id,
                generations=self._generations,
            )
        )
        return state
