"""What awaiting an execution's result finds: its output, or the named error it ended with.

``result()`` on an execution handle waits until the execution is terminal, then:

 #  status      -> answer
 O1 completed   -> the ``end`` node's output (``state.result``)
 O2 error      -> ExecutionFailedError carrying the recorded ExecutionError
 O3 cancelled  -> ExecutionCancelledError (code -499, the node it stopped at)

``error`` is terminal for a waiter although an operator retry may run the execution again:
the waiter is told what happened; a later ``result()`` waits for the new end.
"""

from __future__ import annotations

from typing import Any

from plaita.domain.errors import ExecutionFailedError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.failures import ExecutionCancelledError

JSON = Any


def ends_execution(previous: ExecutionState | None, saved: ExecutionState) -> bool:
    """Whether saving ``saved`` over ``previous`` is the write that ended the execution (a
    save of an ended state over an unknown one counts: announcing twice is harmless)."""
    return saved.is_terminal and (previous is None or not previous.is_terminal)


def execution_outcome(state: ExecutionState) -> JSON:
    """O1-O3 for a terminal ``state``; ``ValueError`` for one that has not ended."""
    if state.status is ExecutionStatus.COMPLETED:
        return state.result
    where = state.stopped_at
    at = f" at node {where!r}" if where else ""
    if state.status is ExecutionStatus.CANCELLED:
        raise ExecutionCancelledError(
            f"execution {state.execution_id!r} of flow {state.flow_id!r} was cancelled{at}",
            node_id=where,
        )
    if state.status is ExecutionStatus.ERROR:
        error = state.error
        detail = "no error was recorded" if error is None else f"{error.kind}: {error.message}"
        raise ExecutionFailedError(
            f"execution {state.execution_id!r} of flow {state.flow_id!r} failed{at}: {detail}",
            execution_id=state.execution_id,
            error=error,
        )
    raise ValueError(f"execution {state.execution_id!r} is {state.status.value}: no result yet")
