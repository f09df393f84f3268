"""What one dispatch writes under its lease: checkpoints, and the two ways it ends an
execution on the spot (an error, a cancel). W4: every write is fenced by the lease's
generation; a holder whose watchdog lost the lease writes nothing more (it fences itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.ports import Clock, ExecutionRepository, SubscriptionStore
from plaita.application.use_cases.step.dispatch import DispatchResult, ack
from plaita.application.use_cases.step.lease_keeper import KeeperRun
from plaita.domain import history
from plaita.domain.errors import LeaseLostError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.domain.failures import CODE_CANCELLED, CODE_FLOW_ERROR
from plaita.domain.history import HistoryEntry


class Writes:
    """The writes of the dispatch that holds ``run``'s lease."""

    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        subscriptions: SubscriptionStore,
        clock: Clock,
        run: KeeperRun,
        listeners: Callable[[], list[object]],
    ) -> None:
        self._executions = executions
        self._subscriptions = subscriptions
        self._clock = clock
        self._run = run
        self._listeners = listeners

    @property
    def worker(self) -> str:
        """This dispatch's holder id: the worker instance its history entries name."""
        return self._run.lease.holder_id

    async def checkpoint(
        self,
        state: ExecutionState,
        *,
        previous: ExecutionState | None,
        history: Sequence[HistoryEntry] = (),
    ) -> None:
        """Save ``state`` (only what changed since ``previous``, S3) under the fence, with the
        history entries of what led to it in the same write."""
        if self._run.lost.is_set():
            raise LeaseLostError(
                f"execution {state.execution_id}: the lease (generation "
                f"{self._run.lease.generation}) was not renewed in time; this worker stops "
                "advancing it and leaves the carrier for whoever holds the lease next"
            )
        async with self._run.writing():  # W15: heartbeats and checkpoints never interleave
            await self._executions.save(
                state, fence=self._run.lease.generation, previous=previous, history=history
            )

    async def fail(
        self,
        state: ExecutionState,
        error: Exception,
        *,
        previous: ExecutionState | None,
        lead: Sequence[HistoryEntry] = (),
    ) -> DispatchResult:
        """End the execution in error at its next node (a definition it cannot run);
        ``lead`` is what happened before, written with the end."""
        now_ms = self._clock.now_ms()
        failed = state.transition(
            ExecutionStatus.ERROR,
            now_ms=now_ms,
            error=ExecutionError(
                CODE_FLOW_ERROR, str(error), state.next_node_id, type(error).__name__
            ),
        )
        ended = history.ended(
            now_ms,
            status=failed.status.value,
            worker=self.worker,
            node_id=state.next_node_id,
            error_code=CODE_FLOW_ERROR,
            message=f"{type(error).__name__}: {error}",
        )
        await self.checkpoint(failed, previous=previous, history=[*lead, ended])
        self.ended(state.execution_id, error)
        return ack("failed", str(error))

    async def cancel(self, state: ExecutionState) -> DispatchResult:
        """W23: cancelled under the lease; its wait, if any, is unregistered."""
        now_ms = self._clock.now_ms()
        cancelled = state.transition(
            ExecutionStatus.CANCELLED,
            now_ms=now_ms,
            error=ExecutionError(CODE_CANCELLED, "cancelled by request", state.next_node_id),
        )
        # The operator's request is in the history already (written when it was made).
        entries = [
            history.ended(
                now_ms,
                status=cancelled.status.value,
                worker=self.worker,
                node_id=state.next_node_id,
                error_code=CODE_CANCELLED,
            ),
        ]
        await self.checkpoint(cancelled, previous=state, history=entries)
        await self.drop_wait(state)
        return ack("cancelled")

    async def drop_wait(self, state: ExecutionState) -> None:
        """Unregister its waits: its suspension's, and every open branch's (E12)."""
        for wait in state.waits:
            if wait.subscription_id is not None:
                await self._subscriptions.remove(wait.subscription_id)

    def ended(self, execution_id: str, error: BaseException) -> None:
        """Tell listeners the flow ended in error — once the worker decided it did (E9)."""
        CallbackManager(self._listeners()).on_flow_end(execution_id, None, error)
