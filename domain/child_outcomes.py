"""How a child execution ended, as its parent reads it, and what the parent node makes of
it (E13, E14): a subflow's result or failure, a map's list in item order.

The parent never trusts the notice of a child's end for the outcome: it reads the child's
own state, so a duplicated, late or lost notice changes nothing but when it looks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from plaita.domain.children import MapProgress, OnItemError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.failures import ChildExecutionError

JSON = Any


@attrs.frozen
class ChildOutcome:
    """A child that ended: its status, its output, or a one-line summary of its error."""

    child_id: str
    status: ExecutionStatus
    result: JSON = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is ExecutionStatus.COMPLETED

    def summary(self) -> str:
        """The failure as a parent reports it: the status, and the child's error message."""
        if self.ok:
            return f"child execution {self.child_id} completed"
        told = f": {self.error}" if self.error else ""
        return f"child execution {self.child_id} {self.status.value}{told}"


def outcome_of(child_id: str, state: ExecutionState | None) -> ChildOutcome | None:
    """The outcome of a child that ended; None while it runs. A child that no longer exists
    (deleted while its parent waited) counts as cancelled."""
    if state is None:
        return ChildOutcome(
            child_id, ExecutionStatus.CANCELLED, error="it was deleted before it ended"
        )
    if not state.is_terminal:
        return None
    if state.status is ExecutionStatus.COMPLETED:
        return ChildOutcome(child_id, state.status, result=state.result)
    message = state.error.message if state.error is not None else None
    return ChildOutcome(child_id, state.status, error=message)


def subflow_result(node_id: str, outcome: ChildOutcome) -> JSON:
    """A subflow node's result: its child's output, or ``ChildExecutionError``."""
    if outcome.ok:
        return outcome.result
    raise ChildExecutionError(f"subflow node {node_id!r}: {outcome.summary()}")


def map_failure(node_id: str, progress: MapProgress, outcome: ChildOutcome) -> ChildExecutionError:
    """The failure of a map under ``fail``: which item failed, and how."""
    told = f"map node {node_id!r}: item {progress.failed_index} failed ({outcome.summary()})"
    cancelled = len(progress.running_indexes())
    if cancelled:
        told += f"; the {cancelled} other running items were cancelled"
    return ChildExecutionError(told)


def map_result(policy: OnItemError, outcomes: Sequence[ChildOutcome]) -> list[JSON]:
    """A finished map's result, in item order: the outputs (``fail``, every item ok), or one
    ``{"ok": true, "result": ...}`` / ``{"ok": false, "error": ...}`` per item (``collect``)."""
    if policy is OnItemError.FAIL:
        return [outcome.result for outcome in outcomes]
    return [
        {"ok": True, "result": outcome.result}
        if outcome.ok
        else {"ok": False, "error": outcome.summary()}
        for outcome in outcomes
    ]
