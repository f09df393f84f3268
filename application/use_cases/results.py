"""Await an execution's end: the ``result()`` of an execution handle.

Race-free and without busy polling: the watch on the end notices opens *before* the state is
read, so an end announced after that read wakes the waiter; each notice (or, when none comes,
every ``poll_interval_s``) leads to one more read of the state, which alone decides. A lost
notice therefore costs at most one interval, never the result.
"""

from __future__ import annotations

from typing import Any

from plaita.application.ports import Clock, EndNotices, ExecutionRepository
from plaita.domain.errors import ResultTimeoutError, UnknownExecutionError
from plaita.domain.execution import ExecutionState
from plaita.domain.ids import validate_execution_id
from plaita.domain.results import execution_outcome

JSON = Any

#: The re-read of the state while no notice comes: bounds what a lost notice costs.
FALLBACK_POLL_S = 2.0


class AwaitResult:
    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        notices: EndNotices,
        clock: Clock,
        poll_interval_s: float = FALLBACK_POLL_S,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError(f"a poll interval must be above 0 s, got {poll_interval_s!r}")
        self._executions = executions
        self._notices = notices
        self._clock = clock
        self._poll_interval_s = poll_interval_s

    async def __call__(self, execution_id: str, *, timeout_s: float | None = None) -> JSON:
        """The output of ``execution_id`` once it ended (O1), or its named error (O2, O3).

        ``ResultTimeoutError`` after ``timeout_s`` (None: no limit) without an end;
        ``UnknownExecutionError`` when it was deleted. An execution not stored yet (its start
        carrier still queued) is waited for like a running one.
        """
        validate_execution_id(execution_id)
        if timeout_s is not None and timeout_s < 0:
            raise ValueError(f"a result timeout must be >= 0 seconds or None, got {timeout_s!r}")
        state = await self.wait_ended(execution_id, timeout_s=timeout_s)
        return execution_outcome(state)

    async def wait_ended(self, execution_id: str, *, timeout_s: float | None) -> ExecutionState:
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        async with self._notices.watch(execution_id) as watch:
            while True:
                state = await self._executions.load(execution_id)
                if state is not None and state.is_terminal:
                    return state
                if state is None:
                    await self._check_not_deleted(execution_id)
                wait_s = self._poll_interval_s
                if deadline is not None:
                    left = deadline - self._clock.monotonic()
                    if left <= 0:
                        raise self._timed_out(execution_id, state, timeout_s)
                    wait_s = min(wait_s, left)
                await watch.wait(wait_s)

    async def _check_not_deleted(self, execution_id: str) -> None:
        tombstone = await self._executions.tombstone(execution_id)
        if tombstone is not None:
            raise UnknownExecutionError(
                f"execution {execution_id!r} was deleted ({tombstone.reason or 'no reason'}); "
                "it has no result"
            )

    @staticmethod
    def _timed_out(
        execution_id: str, state: ExecutionState | None, timeout_s: float | None
    ) -> ResultTimeoutError:
        status = None if state is None else state.status.value
        where = (
            "its start is still queued (is a worker running?)"
            if state is None
            else f"it is {status} at node {state.next_node_id!r}"
        )
        return ResultTimeoutError(
            f"execution {execution_id!r} had not ended after {timeout_s} s: {where}. It goes "
            "on; call result() again to wait longer",
            execution_id=execution_id,
            status=status,
        )
