"""The execution state machine and checkpoint serialisation (W7, R1, S1)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import IllegalTransitionError
from plaita.domain.execution import (
    LEGAL_TRANSITIONS,
    MAX_FAILURE_MESSAGE_CHARS,
    TERMINAL_STATUSES,
    ExecutionError,
    ExecutionState,
    ExecutionStatus,
    NodeFailure,
    Suspension,
    check_transition,
)

from ..strategies import json_objects, json_values

RUNNING = ExecutionStatus.RUNNING
SUSPENDED = ExecutionStatus.SUSPENDED
COMPLETED = ExecutionStatus.COMPLETED
ERROR = ExecutionStatus.ERROR
CANCELLED = ExecutionStatus.CANCELLED

ids = st.text(min_size=1, max_size=16)
optional_ids = st.none() | ids
millis = st.integers(min_value=0, max_value=2**53)

suspensions = st.builds(
    Suspension, node_id=ids, subscription_id=optional_ids, wake_at_ms=st.none() | millis
)
execution_errors = st.builds(
    ExecutionError,
    code=st.integers(min_value=-(2**31), max_value=2**31),
    message=st.text(max_size=40),
    node_id=optional_ids,
    kind=st.sampled_from(["FlowErrorException", "ExecutionDeadlineError", "FlowTimeoutError"]),
)


states = st.builds(
    ExecutionState,
    execution_id=ids,
    flow_id=ids,
    flow_version=ids,
    fingerprint=st.text(alphabet="0123456789abcdef", max_size=64),
    status=st.sampled_from(ExecutionStatus),
    created_at_ms=millis,
    updated_at_ms=millis,
    tenant_id=ids,
    input=json_objects,
    variables=json_objects,
    node_results=json_objects,
    next_node_id=optional_ids,
    last_node_id=optional_ids,
    last_branch=optional_ids,
    suspension=st.none() | suspensions,
    result=json_values,
    error=st.none() | execution_errors,
    steps=st.integers(min_value=0, max_value=10**6),
    last_failure=st.none()
    | st.builds(
        NodeFailure,
        node_id=ids,
        attempt=st.integers(min_value=1, max_value=10**6),
        error_class=ids,
        message=st.text(max_size=40),
        transient=st.booleans(),
        at_ms=millis,
        retry_at_ms=st.none() | millis,
    ),
)


def new_state(**overrides: Any) -> ExecutionState:
    state = ExecutionState.new(
        execution_id="x-1",
        flow_id="approval",
        flow_version="1",
        fingerprint="ab" * 32,
        start_node_id="request",
        input={"amount": 120},
        now_ms=1_000,
    )
    return attrs.evolve(state, **overrides)


# --- the transition table -----------------------------------------------------------


def test_transition_table_is_the_one_the_spec_describes() -> None:
    """Terminal states absorb; `error` only wakes up to `running` on a retry (W7, R1);
    `pending` moves wherever `running` does and nothing moves back to it (ADR 0022)."""
    assert {
        ExecutionStatus.PENDING: {RUNNING, SUSPENDED, COMPLETED, ERROR, CANCELLED},
        RUNNING: {RUNNING, SUSPENDED, COMPLETED, ERROR, CANCELLED},
        SUSPENDED: {RUNNING, SUSPENDED, ERROR, CANCELLED},
        ERROR: {RUNNING},
        COMPLETED: set(),
        CANCELLED: set(),
    } == LEGAL_TRANSITIONS


def test_pending_and_running_advance_on_a_continue_and_nothing_else_does() -> None:
    assert [s for s in ExecutionStatus if s.advances_on_continue] == [
        ExecutionStatus.PENDING,
        RUNNING,
    ]


def test_a_new_execution_is_pending_or_running_only() -> None:
    pending = attrs.evolve(new_state(), status=ExecutionStatus.PENDING)
    assert pending.transition(RUNNING, now_ms=2_000).status is RUNNING
    with pytest.raises(ValueError, match="pending or running"):
        ExecutionState.new(
            execution_id="x",
            flow_id="f",
            flow_version="1",
            fingerprint="",
            start_node_id="a",
            input={},
            now_ms=0,
            status=SUSPENDED,
        )


def test_the_last_failure_round_trips_and_its_message_is_bounded() -> None:
    failure = NodeFailure.of(
        node_id="charge",
        attempt=3,
        error_class="ConnectionError",
        message="x" * 5_000,
        transient=True,
        at_ms=5,
        retry_at_ms=9,
    )
    assert len(failure.message) == MAX_FAILURE_MESSAGE_CHARS and failure.message.endswith("…")
    state = attrs.evolve(new_state(), last_failure=failure)
    assert ExecutionState.from_json(state.to_json()) == state
    assert ExecutionState.from_json({**state.to_json(), "last_failure": None}).last_failure is None


def test_every_status_has_a_row_in_the_table() -> None:
    assert set(LEGAL_TRANSITIONS) == set(ExecutionStatus)


def test_completed_error_and_cancelled_are_terminal() -> None:
    assert {COMPLETED, ERROR, CANCELLED} == TERMINAL_STATUSES
    assert [s for s in ExecutionStatus if s.is_terminal] == [COMPLETED, ERROR, CANCELLED]


@pytest.mark.parametrize("status", [COMPLETED, CANCELLED])
@pytest.mark.parametrize("target", list(ExecutionStatus))
def test_completed_and_cancelled_allow_no_transition_at_all(
    status: ExecutionStatus, target: ExecutionStatus
) -> None:
    with pytest.raises(IllegalTransitionError):
        new_state(status=status).transition(target, now_ms=2_000)


@pytest.mark.parametrize("target", [SUSPENDED, COMPLETED, ERROR, CANCELLED])
def test_error_allows_nothing_but_the_retry_wake_up(target: ExecutionStatus) -> None:
    state = new_state(status=ERROR, error=ExecutionError(code=-500, message="boom"))

    with pytest.raises(IllegalTransitionError):
        state.transition(target, now_ms=2_000)
    assert state.transition(RUNNING, now_ms=2_000, error=None).status is RUNNING


@given(state=states, target=st.sampled_from(ExecutionStatus), now_ms=millis)
def test_transition_succeeds_iff_the_table_allows_it(
    state: ExecutionState, target: ExecutionStatus, now_ms: int
) -> None:
    snapshot = state.to_json()

    if target in LEGAL_TRANSITIONS[state.status]:
        moved = state.transition(target, now_ms=now_ms)
        assert moved.status is target
        assert moved.updated_at_ms == now_ms
    else:
        with pytest.raises(IllegalTransitionError):
            state.transition(target, now_ms=now_ms)
    assert state.to_json() == snapshot


@given(current=st.sampled_from(ExecutionStatus), target=st.sampled_from(ExecutionStatus))
def test_check_transition_raises_iff_the_table_forbids(
    current: ExecutionStatus, target: ExecutionStatus
) -> None:
    if target in LEGAL_TRANSITIONS[current]:
        check_transition(current, target)
    else:
        with pytest.raises(IllegalTransitionError, match=f"{current.value}.*{target.value}"):
            check_transition(current, target)


def test_transition_applies_the_given_changes() -> None:
    moved = new_state().transition(
        COMPLETED, now_ms=5_000, result={"approved": True}, last_node_id="done", steps=4
    )

    assert (moved.result, moved.last_node_id, moved.steps) == ({"approved": True}, "done", 4)


def test_leaving_suspended_clears_the_suspension() -> None:
    waiting = new_state().transition(
        SUSPENDED, now_ms=2_000, suspension=Suspension(node_id="wait", subscription_id="s-1")
    )

    resumed = waiting.transition(RUNNING, now_ms=3_000)

    assert waiting.suspension == Suspension(node_id="wait", subscription_id="s-1")
    assert resumed.suspension is None


def test_a_failed_transition_leaves_the_state_untouched() -> None:
    state = new_state(status=COMPLETED, result=1)

    with pytest.raises(IllegalTransitionError):
        state.transition(RUNNING, now_ms=9_999, result=2)

    assert (state.status, state.result, state.updated_at_ms) == (COMPLETED, 1, 1_000)


# --- a new execution ----------------------------------------------------------------


def test_a_new_execution_runs_from_the_start_node() -> None:
    state = new_state()

    assert state.status is RUNNING
    assert not state.is_terminal
    assert state.next_node_id == "request"
    assert state.created_at_ms == state.updated_at_ms == 1_000
    assert (state.tenant_id, state.steps, state.suspension, state.error) == (
        "default",
        0,
        None,
        None,
    )


def test_a_new_execution_keeps_its_own_copy_of_the_input() -> None:
    params = {"amount": 1}
    state = ExecutionState.new(
        execution_id="x",
        flow_id="f",
        flow_version="1",
        fingerprint="",
        start_node_id="a",
        input=params,
        now_ms=0,
    )
    params["amount"] = 2

    assert state.input == {"amount": 1}


def test_execution_state_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        new_state().status = COMPLETED  # type: ignore[misc]


# --- JSON (S1) ----------------------------------------------------------------------


@given(states)
def test_execution_state_survives_a_json_round_trip(state: ExecutionState) -> None:
    text = json.dumps(state.to_json(), allow_nan=False)

    assert ExecutionState.from_json(json.loads(text)) == state


@given(suspensions)
def test_suspension_survives_a_json_round_trip(suspension: Suspension) -> None:
    assert Suspension.from_json(json.loads(json.dumps(suspension.to_json()))) == suspension


@given(execution_errors)
def test_execution_error_survives_a_json_round_trip(error: ExecutionError) -> None:
    assert ExecutionError.from_json(json.loads(json.dumps(error.to_json()))) == error


def test_a_legacy_row_without_fingerprint_tenant_or_steps_loads_with_defaults() -> None:
    """Old rows without a hash skip the drift check (W7): they load with an empty one."""
    raw = {
        "execution_id": "x",
        "flow_id": "f",
        "flow_version": "1",
        "status": "suspended",
        "created_at_ms": 1,
        "updated_at_ms": 2,
    }

    state = ExecutionState.from_json(raw)

    assert (state.fingerprint, state.tenant_id, state.steps) == ("", "default", 0)
    assert state.status is SUSPENDED
    assert (state.input, state.variables, state.node_results) == ({}, {}, {})


def test_an_unknown_status_in_a_row_is_refused() -> None:
    raw = new_state().to_json() | {"status": "paused-forever"}

    with pytest.raises(ValueError):
        ExecutionState.from_json(raw)
