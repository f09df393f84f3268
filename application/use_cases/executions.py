"""Queries and operator requests on executions: show, history, resume."""

from __future__ import annotations

import logging

from plaita.application.ports import Clock, ExecutionRepository, TaskQueue
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import UnknownExecutionError
from plaita.domain.execution import ExecutionState
from plaita.domain.history import DEFAULT_HISTORY_PAGE, HistoryEntry, HistoryPage

history_log = logging.getLogger("plaita.history")


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


async def append_history_best_effort(
    executions: ExecutionRepository, execution_id: str, entry: HistoryEntry
) -> None:
    """Append ``entry`` where no checkpoint carries it (a lost lease, an operator's action):
    the thing it tells of happened whatever becomes of the entry, so a failure to write it
    is logged (``history.append_failed``) and swallowed."""
    try:
        await executions.append_history(execution_id, [entry])
    except Exception as exc:
        history_log.warning(
            "event=history.append_failed execution_id=%s kind=%s error=%r: the entry is not "
            "in the history; what it tells of took effect, and nothing else depends on it",
            execution_id,
            entry.kind.value,
            exc,
        )
