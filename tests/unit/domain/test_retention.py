"""Retention (S5): what a checkpoint does to the lifetime of an execution's records."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.checkpoint import checkpoint_delta
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.retention import (
    DEFAULT_RETENTION_MS,
    Lifetime,
    check_retention_ms,
    lifetime_change,
)

S = ExecutionStatus
LIVE = [S.RUNNING, S.SUSPENDED]
TERMINAL = [S.COMPLETED, S.ERROR, S.CANCELLED]


@pytest.mark.parametrize("current", TERMINAL)
@pytest.mark.parametrize("previous", [None, *LIVE, *TERMINAL])
def test_a_terminal_checkpoint_expires_the_records(
    previous: ExecutionStatus | None, current: ExecutionStatus
) -> None:
    """S5: the checkpoint that ends an execution, and any terminal one after it."""
    assert lifetime_change(previous, current) is Lifetime.EXPIRE


@pytest.mark.parametrize("current", LIVE)
@pytest.mark.parametrize("previous", TERMINAL)
def test_a_live_checkpoint_over_a_terminal_one_persists_the_records(
    previous: ExecutionStatus, current: ExecutionStatus
) -> None:
    """W7 wake-up, W23 retry from a node: an execution live again must not expire."""
    assert lifetime_change(previous, current) is Lifetime.PERSIST


@pytest.mark.parametrize("current", LIVE)
def test_a_full_live_write_persists_the_records(current: ExecutionStatus) -> None:
    """Nothing known about what was stored: whatever lifetime it had is taken away."""
    assert lifetime_change(None, current) is Lifetime.PERSIST


@pytest.mark.parametrize("current", LIVE)
@pytest.mark.parametrize("previous", LIVE)
def test_a_live_step_keeps_the_lifetime(
    previous: ExecutionStatus, current: ExecutionStatus
) -> None:
    """The steady-state step writes nothing about lifetimes (P2, P3)."""
    assert lifetime_change(previous, current) is Lifetime.KEEP


@given(st.none() | st.sampled_from(S), st.sampled_from(S))
def test_only_terminal_checkpoints_expire_and_only_live_ones_persist(
    previous: ExecutionStatus | None, current: ExecutionStatus
) -> None:
    change = lifetime_change(previous, current)
    assert (change is Lifetime.EXPIRE) == current.is_terminal
    if change is Lifetime.PERSIST:
        assert previous is None or previous.is_terminal


def _state(status: ExecutionStatus) -> ExecutionState:
    started = ExecutionState.new(
        execution_id="x-1",
        flow_id="orders",
        flow_version="1",
        fingerprint="f" * 64,
        start_node_id="a",
        input={},
        now_ms=1,
    )
    return attrs.evolve(started, status=status)


def test_the_checkpoint_delta_carries_the_lifetime_change() -> None:
    running, completed = _state(S.RUNNING), _state(S.COMPLETED)

    assert checkpoint_delta(None, running).lifetime is Lifetime.PERSIST
    assert checkpoint_delta(running, running).lifetime is Lifetime.KEEP
    assert checkpoint_delta(running, completed).lifetime is Lifetime.EXPIRE
    assert checkpoint_delta(_state(S.ERROR), running).lifetime is Lifetime.PERSIST


def test_the_default_retention_is_seven_days() -> None:
    """S5: nothing is kept forever by default."""
    assert DEFAULT_RETENTION_MS == 7 * 24 * 60 * 60 * 1000


@pytest.mark.parametrize("value", [0, -1, 1.5, True, None])
def test_a_retention_must_be_a_positive_whole_number_of_ms(value: object) -> None:
    with pytest.raises(ValueError, match="retention must be a positive number of milliseconds"):
        check_retention_ms(value)  # type: ignore[arg-type]


def test_a_positive_retention_is_accepted() -> None:
    assert check_retention_ms(1) == 1
