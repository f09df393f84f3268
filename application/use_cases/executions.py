"""Queries and operator requests on executions: show, history, resume."""

from __future__ import annotations

from plaita.application.ports import Clock, ExecutionRepository, TaskQueue
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import UnknownExecutionError
from plaita.domain.execution import ExecutionState
from plaita.domain.history import DEFAULT_HISTORY_PAGE, HistoryPage


class GetExecution:
    def __init__(self, executions: ExecutionRepository) -> None:
        self._executions = executions

    async def __call__(self, execution_id: str) -> ExecutionState:
        state = await self._executions.load(execution_id)
        if state is None:
            raise UnknownExecutionError(
                f"execution {execution_id!r} does not exist for this tenant: it was never "
                "started, or it was deleted or has passed its retention (check the id and the "
                "tenant; plaita executions list shows what exists)"
            )
        return state


class ExecutionHistory:
    """A page of an execution's history; ``UnknownExecutionError`` when it has none and no
    state (never started, deleted, or past its retention)."""

    def __init__(self, executions: ExecutionRepository) -> None:
        self._executions = executions

    async def __call__(
        self, execution_id: str, *, after: int | None = None, limit: int = DEFAULT_HISTORY_PAGE
    ) -> HistoryPage:
        page = await self._executions.history(execution_id, after=after, limit=limit)
        if page.entries or page.dropped or after:
            return page
        await GetExecution(self._executions)(execution_id)  # raises when there is none
        return page


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
