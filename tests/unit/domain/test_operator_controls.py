"""Operator control decisions (W23): one test per row of the table in
``plaita.domain.operator_controls``, the retry plans, the pause-gate rule, the page cursor."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.errors import InvalidOperatorRequestError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus, Suspension
from plaita.domain.operator_controls import (
    MAX_BULK_LIMIT,
    MAX_PAGE_LIMIT,
    ControlFlags,
    OperatorAction,
    PageCursor,
    RetryKind,
    Verdict,
    carrier_parkable,
    check_bulk_limit,
    check_page_limit,
    decide_cancel,
    decide_pause,
    decide_resume_request,
    decide_retry,
    decide_unpause,
    parked_carrier_id,
    parse_action,
    parse_status,
    restart_at,
    restart_counter_changes,
    should_park,
)

S = ExecutionStatus
NODES = frozenset({"a", "b", "wait", "done"})
NONE = ControlFlags()
PAUSED = ControlFlags(paused=True)


def state(status: ExecutionStatus, **changes: Any) -> ExecutionState:
    base = ExecutionState(
        execution_id="x-1",
        flow_id="f",
        flow_version="1",
        fingerprint="fp-old",
        status=status,
        created_at_ms=1,
        updated_at_ms=2,
        next_node_id="b",
        node_results={"a": {"ok": 1}},
    )
    return attrs.evolve(base, **changes)


# --- pause / unpause / cancel / resume --------------------------------------------------------


@pytest.mark.parametrize("status", [S.RUNNING, S.SUSPENDED])
def test_a_live_execution_can_be_paused(status: ExecutionStatus) -> None:
    assert decide_pause("x-1", status, NONE).verdict is Verdict.PROCEED


@pytest.mark.parametrize("status", [S.ERROR, S.COMPLETED, S.CANCELLED])
def test_a_terminal_execution_cannot_be_paused(status: ExecutionStatus) -> None:
    decision = decide_pause("x-1", status, NONE)
    assert decision.verdict is Verdict.REFUSE
    assert decision.reason == f"execution_{status.value}"
    assert "x-1" in decision.detail and status.value in decision.detail


def test_pausing_a_paused_execution_is_a_no_op() -> None:
    decision = decide_pause("x-1", S.SUSPENDED, PAUSED)
    assert (decision.verdict, decision.reason) == (Verdict.NO_OP, "already_paused")


@pytest.mark.parametrize("status", list(S))
def test_unpause_proceeds_for_any_status_while_paused(status: ExecutionStatus) -> None:
    assert decide_unpause("x-1", status, PAUSED).verdict is Verdict.PROCEED


def test_unpause_drains_carriers_left_parked_by_an_unpause_that_stopped_half_way() -> None:
    decision = decide_unpause("x-1", S.SUSPENDED, ControlFlags(paused=False, parked=2))
    assert decision.verdict is Verdict.PROCEED


def test_unpausing_an_execution_that_is_not_paused_is_a_no_op() -> None:
    decision = decide_unpause("x-1", S.RUNNING, NONE)
    assert (decision.verdict, decision.reason) == (Verdict.NO_OP, "not_paused")


@pytest.mark.parametrize("flags", [NONE, PAUSED, ControlFlags(cancel_requested=True)])
@pytest.mark.parametrize("status", [S.RUNNING, S.SUSPENDED])
def test_a_live_execution_can_be_cancelled_even_paused_or_cancelled_before(
    status: ExecutionStatus, flags: ControlFlags
) -> None:
    assert decide_cancel("x-1", status, flags).verdict is Verdict.PROCEED


@pytest.mark.parametrize("status", [S.ERROR, S.COMPLETED, S.CANCELLED])
def test_a_terminal_execution_cannot_be_cancelled(status: ExecutionStatus) -> None:
    decision = decide_cancel("x-1", status, NONE)
    assert decision.verdict is Verdict.REFUSE
    assert status.value in decision.detail


def test_a_running_execution_can_be_resumed() -> None:
    assert decide_resume_request("x-1", S.RUNNING, NONE).verdict is Verdict.PROCEED


def test_a_suspended_execution_is_not_resumed_its_event_or_timer_moves_it() -> None:
    """A continue carrier for a suspended execution answered "continue_enqueued" and did
    nothing (issue 16): it is refused, pointing at what works."""
    decision = decide_resume_request("x-1", S.SUSPENDED, NONE)
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "execution_suspended")
    assert "publish the event" in decision.detail


@pytest.mark.parametrize("status", [S.ERROR, S.CANCELLED])
def test_resuming_a_stopped_execution_points_at_retry(status: ExecutionStatus) -> None:
    decision = decide_resume_request("x-1", status, NONE)
    assert decision.verdict is Verdict.REFUSE
    assert "retry it instead" in decision.detail


def test_a_completed_execution_cannot_be_resumed() -> None:
    assert decide_resume_request("x-1", S.COMPLETED, NONE).verdict is Verdict.REFUSE


# --- retry -------------------------------------------------------------------------------------


def test_retry_of_a_running_execution_is_a_conflict() -> None:
    decision = decide_retry(state(S.RUNNING), from_node="a", flow_nodes=NODES)
    assert (decision.verdict, decision.reason) == (Verdict.CONFLICT, "execution_running")
    assert "cancel it" in decision.detail


def test_retry_of_a_completed_execution_is_refused() -> None:
    decision = decide_retry(state(S.COMPLETED), from_node="a", flow_nodes=NODES)
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "execution_completed")


def test_retry_of_an_error_without_a_node_is_the_w7_wake_up() -> None:
    decision = decide_retry(state(S.ERROR), from_node=None, flow_nodes=NODES)
    assert (decision.verdict, decision.kind, decision.node_id) == (
        Verdict.PROCEED,
        RetryKind.WAKE_UP,
        None,
    )


@pytest.mark.parametrize("status", [S.ERROR, S.CANCELLED, S.SUSPENDED])
def test_retry_from_a_named_node_restarts_there(status: ExecutionStatus) -> None:
    decision = decide_retry(state(status), from_node="a", flow_nodes=NODES)
    assert (decision.verdict, decision.kind, decision.node_id) == (
        Verdict.PROCEED,
        RetryKind.RESTART,
        "a",
    )


@pytest.mark.parametrize("status", [S.ERROR, S.CANCELLED, S.SUSPENDED])
def test_retry_from_a_node_not_in_the_flow_names_the_node_and_the_choices(
    status: ExecutionStatus,
) -> None:
    decision = decide_retry(state(status), from_node="nope", flow_nodes=NODES)
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "unknown_node")
    assert "'nope'" in decision.detail
    assert "a, b, done, wait" in decision.detail


def test_retry_of_a_cancelled_execution_restarts_where_it_was_cancelled() -> None:
    cancelled = state(S.CANCELLED, error=ExecutionError(-1, "cancelled", "wait"))
    decision = decide_retry(cancelled, from_node=None, flow_nodes=NODES)
    assert (decision.kind, decision.node_id) == (RetryKind.RESTART, "wait")


def test_retry_of_a_cancelled_execution_whose_node_left_the_flow_is_refused() -> None:
    cancelled = state(S.CANCELLED, error=ExecutionError(-1, "cancelled", "gone"))
    decision = decide_retry(cancelled, from_node=None, flow_nodes=NODES)
    assert decision.reason == "unknown_node"
    assert "where it was cancelled" in decision.detail


def test_retry_of_a_suspended_execution_needs_a_node() -> None:
    waiting = state(S.SUSPENDED, suspension=Suspension("wait", "sub-1"))
    decision = decide_retry(waiting, from_node=None, flow_nodes=NODES)
    assert (decision.verdict, decision.reason) == (Verdict.REFUSE, "suspended_needs_node")
    assert "'wait'" in decision.detail


def test_restart_sets_it_running_at_the_node_and_keeps_earlier_results() -> None:
    failed = state(
        S.CANCELLED,
        error=ExecutionError(-1, "cancelled", "b"),
        suspension=None,
        result={"old": True},
    )
    restarted = restart_at(
        failed, node_id="a", now_ms=99, fingerprint="fp-new", subgraph_fingerprint="sub-a"
    )
    assert restarted.status is S.RUNNING
    assert (restarted.next_node_id, restarted.error, restarted.result) == ("a", None, None)
    assert (restarted.execution_id, restarted.node_results) == ("x-1", {"a": {"ok": 1}})
    assert (restarted.fingerprint, restarted.subgraph_fingerprint) == ("fp-new", "sub-a")
    assert restarted.updated_at_ms == 99


def test_a_restart_gives_only_the_restarted_node_a_fresh_budget() -> None:
    """W2, W23: its retries and its crashed attempts; an execution given up after
    ``--max-deliveries`` crashed attempts would otherwise be given up again at once."""
    assert restart_counter_changes("b") == (
        CounterChange(Counter.NODE_RETRIES, CounterOp.RESET, "b"),
        CounterChange(Counter.NODE_CRASHES, CounterOp.RESET, "b"),
    )


# --- the pause gate ----------------------------------------------------------------------------


def carrier(resume_type: ResumeType | None) -> TaskEnvelope:
    if resume_type is None:
        return TaskEnvelope.start(
            execution_id="x-1",
            flow_id="f",
            version="1",
            params={},
            now_ms=5,
            generations=LEGACY_GENERATIONS,
        )
    return TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="f",
        resume_type=resume_type,
        now_ms=5,
        generations=LEGACY_GENERATIONS,
    )


@pytest.mark.parametrize(
    "resume_type", [None, *[t for t in ResumeType if t is not ResumeType.CANCEL]]
)
def test_every_carrier_but_a_cancel_can_be_parked(resume_type: ResumeType | None) -> None:
    assert carrier_parkable(carrier(resume_type))


def test_a_cancel_carrier_is_never_parked() -> None:
    assert not carrier_parkable(carrier(ResumeType.CANCEL))


@given(paused=st.booleans(), cancel=st.booleans(), parkable=st.booleans())
def test_a_carrier_is_parked_only_when_paused_without_a_cancel_request(
    paused: bool, cancel: bool, parkable: bool
) -> None:
    flags = ControlFlags(paused=paused, cancel_requested=cancel)
    assert should_park(flags, parkable=parkable) == (paused and not cancel and parkable)


def test_the_same_carrier_always_gets_the_same_parked_id() -> None:
    fields = {"envelope": '{"a":1}', "schema_version": "1"}
    assert parked_carrier_id(fields) == parked_carrier_id(dict(reversed(fields.items())))
    assert parked_carrier_id(fields) != parked_carrier_id({**fields, "schema_version": "2"})


# --- requests, limits and the cursor -------------------------------------------------------------


def test_actions_and_statuses_parse_or_name_the_bad_value() -> None:
    assert parse_action("pause") is OperatorAction.PAUSE
    assert parse_status("error") is S.ERROR
    with pytest.raises(InvalidOperatorRequestError, match=r"'stop'.*resume, retry"):
        parse_action("stop")
    with pytest.raises(InvalidOperatorRequestError, match=r"'failed'.*running"):
        parse_status("failed")


@pytest.mark.parametrize("limit", [0, -1, MAX_BULK_LIMIT + 1, True, 2.5])
def test_a_bulk_limit_out_of_range_is_refused(limit: Any) -> None:
    with pytest.raises(InvalidOperatorRequestError, match=repr(limit).replace(".", r"\.")):
        check_bulk_limit(limit)


@pytest.mark.parametrize("limit", [0, MAX_PAGE_LIMIT + 1, False])
def test_a_page_limit_out_of_range_is_refused(limit: Any) -> None:
    with pytest.raises(InvalidOperatorRequestError, match="from 1 to 500"):
        check_page_limit(limit)
    assert check_page_limit(MAX_PAGE_LIMIT) == MAX_PAGE_LIMIT


@given(score=st.integers(min_value=0, max_value=2**53), execution_id=st.text(min_size=1))
def test_a_cursor_survives_its_round_trip(score: int, execution_id: str) -> None:
    cursor = PageCursor(score, execution_id)
    text = cursor.encode()
    assert "=" not in text and "/" not in text and "+" not in text
    assert PageCursor.decode(text) == cursor


@pytest.mark.parametrize(
    "text", ["", "not-base64!", "bnVsbA", "WzEsMl0", "WyJ4IiwieCJd", "W3RydWUsIngiXQ", "WzEsIiJd"]
)
def test_a_cursor_that_no_listing_returned_is_refused(text: str) -> None:
    with pytest.raises(InvalidOperatorRequestError, match="next_cursor"):
        PageCursor.decode(text)


def test_a_cursor_orders_by_score_then_id_descending() -> None:
    cursor = PageCursor(100, "m")
    assert cursor.precedes(99, "z")
    assert cursor.precedes(100, "l")
    assert not cursor.precedes(100, "m")
    assert not cursor.precedes(100, "n")
    assert not cursor.precedes(101, "a")
