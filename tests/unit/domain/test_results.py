"""What result() finds when an execution ended (domain/results.py, O1-O3), and which save
ends an execution."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from plaita.domain.errors import ExecutionFailedError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.domain.failures import CODE_CANCELLED, ExecutionCancelledError
from plaita.domain.results import ends_execution, execution_outcome


def state(status: ExecutionStatus, **changes: Any) -> ExecutionState:
    base = ExecutionState.new(
        execution_id="e-1",
        flow_id="approval",
        flow_version="1",
        fingerprint="f",
        start_node_id="submit",
        input={},
        now_ms=0,
    )
    return attrs.evolve(base, status=status, **changes)


def test_o1_completed_answers_the_end_output() -> None:
    assert execution_outcome(state(ExecutionStatus.COMPLETED, result={"ok": 1})) == {"ok": 1}
    assert execution_outcome(state(ExecutionStatus.COMPLETED)) is None


def test_o2_error_raises_with_the_recorded_error() -> None:
    error = ExecutionError(1001, "amount too high", "check", "DeterministicNodeError")
    with pytest.raises(ExecutionFailedError) as failed:
        execution_outcome(state(ExecutionStatus.ERROR, error=error))
    assert failed.value.error == error
    assert failed.value.execution_id == "e-1"
    assert "at node 'check'" in str(failed.value)
    assert "DeterministicNodeError: amount too high" in str(failed.value)


def test_o2_an_error_without_a_record_still_fails_by_name() -> None:
    with pytest.raises(ExecutionFailedError, match="no error was recorded") as failed:
        execution_outcome(state(ExecutionStatus.ERROR, next_node_id=None))
    assert failed.value.error is None


def test_o3_cancelled_raises_cancelled_at_its_node() -> None:
    cancelled = state(
        ExecutionStatus.CANCELLED,
        error=ExecutionError(CODE_CANCELLED, "cancelled by request", "wait"),
    )
    with pytest.raises(ExecutionCancelledError, match="was cancelled at node 'wait'") as raised:
        execution_outcome(cancelled)
    assert raised.value.node_id == "wait"
    assert raised.value.code == CODE_CANCELLED


@pytest.mark.parametrize("status", [ExecutionStatus.RUNNING, ExecutionStatus.SUSPENDED])
def test_a_live_execution_has_no_outcome(status: ExecutionStatus) -> None:
    with pytest.raises(ValueError, match="no result yet"):
        execution_outcome(state(status))


@pytest.mark.parametrize(
    ("previous", "saved", "ends"),
    [
        (None, ExecutionStatus.COMPLETED, True),
        (ExecutionStatus.RUNNING, ExecutionStatus.COMPLETED, True),
        (ExecutionStatus.SUSPENDED, ExecutionStatus.CANCELLED, True),
        (ExecutionStatus.RUNNING, ExecutionStatus.ERROR, True),
        (ExecutionStatus.ERROR, ExecutionStatus.ERROR, False),
        (ExecutionStatus.RUNNING, ExecutionStatus.SUSPENDED, False),
        (None, ExecutionStatus.RUNNING, False),
        (ExecutionStatus.ERROR, ExecutionStatus.RUNNING, False),
    ],
)
def test_the_save_that_ends_an_execution(
    previous: ExecutionStatus | None, saved: ExecutionStatus, ends: bool
) -> None:
    before = None if previous is None else state(previous)
    assert ends_execution(before, state(saved)) is ends
