"""The resume policy: one test per row of the W7 decision table, then properties over all rows.

Row numbers refer to the table in ``plaita.domain.resume``; the incidents are listed in
docs/incidents.md: #23 terminal short-circuit, #33 continue/retry on a suspended run,
#53 retry on a running run, #73 wake-up caps, #221/#258 stale event/timeout carriers.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.envelope import ResumeType
from plaita.domain.errors import DefinitionDriftError, ResumeProtocolError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus, Suspension
from plaita.domain.resume import (
    DETERMINISTIC_FAILURE_MAX,
    G1_MAX_WAKEUPS,
    CurrentDefinition,
    DefinitionDrift,
    ExecutionView,
    ResumeDecision,
    ResumeKind,
    ResumeReason,
    ResumeRequest,
    WaitView,
    WakeUpCaps,
    compare_definitions,
    decide_resume,
)

RUNNING = ExecutionStatus.RUNNING
SUSPENDED = ExecutionStatus.SUSPENDED
ERROR = ExecutionStatus.ERROR
COMPLETED = ExecutionStatus.COMPLETED
CANCELLED = ExecutionStatus.CANCELLED
CONTINUE, RETRY, EVENT, TIMEOUT, CANCEL = (
    ResumeType.CONTINUE,
    ResumeType.RETRY,
    ResumeType.EVENT,
    ResumeType.TIMEOUT,
    ResumeType.CANCEL,
)

DEPLOYED = CurrentDefinition(fingerprint="fp-new", subgraph_fingerprint="sub-same")
WAIT = WaitView(node_id="approve", subscription_id="sub-1", timer_pending=True)
THIS_EVENT = ResumeRequest(EVENT, subscription_id="sub-1", event_id="ev-1")
THIS_TIMEOUT = ResumeRequest(TIMEOUT, subscription_id="sub-1")


def execution(status: ExecutionStatus, **changes: Any) -> ExecutionView:
    """An execution started on the deployed definition, waiting at ``approve`` if suspended."""
    base = ExecutionView(
        execution_id="x-1",
        status=status,
        node_id="approve",
        wait=WAIT if status is SUSPENDED else None,
        fingerprint="fp-new",
        subgraph_fingerprint="sub-same",
    )
    return attrs.evolve(base, **changes)


def drifted(status: ExecutionStatus, **changes: Any) -> ExecutionView:
    """Started on an older definition whose graph from ``approve`` differs from today's."""
    return execution(status, fingerprint="fp-old", subgraph_fingerprint="sub-old", **changes)


def decide(view: ExecutionView, request: ResumeRequest | ResumeType) -> ResumeDecision:
    if isinstance(request, ResumeType):
        request = ResumeRequest(request)
    return decide_resume(view, request, DEPLOYED)


# --- row 1: terminal ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "resume_type"),
    [(COMPLETED, t) for t in ResumeType]
    + [(CANCELLED, t) for t in ResumeType]
    + [(ERROR, t) for t in ResumeType if t is not RETRY],
)
def test_a_terminal_execution_short_circuits_unchanged_without_a_lease(
    status: ExecutionStatus, resume_type: ResumeType
) -> None:
    """Row 1 (W7, #23): a redelivered resume of a finished run is acked and changes nothing."""
    decision = decide(execution(status, cancel_requested=True), resume_type)

    assert (decision.kind, decision.reason) == (ResumeKind.SHORT_CIRCUIT, ResumeReason.TERMINAL)
    assert decision.ack and not decision.take_lease


# --- rows 2-6: error + retry -----------------------------------------------------------


def test_retry_on_an_errored_execution_with_a_cancel_intent_is_refused() -> None:
    """Row 2 (W7, W23: a set cancel intent wins): no nodes run for an execution asked to stop."""
    decision = decide(execution(ERROR, cancel_requested=True), RETRY)

    assert (decision.kind, decision.reason) == (ResumeKind.REFUSE, ResumeReason.CANCEL_REQUESTED)
    assert decision.ack and not decision.take_lease


def test_retry_after_the_wake_up_cap_is_refused_as_g1_wakeups_exhausted() -> None:
    """Row 3 (W7, #73): refused with a reason, no exception, state unchanged."""
    decision = decide(execution(ERROR, g1_wakeups=G1_MAX_WAKEUPS), RETRY)

    assert (decision.kind, decision.reason) == (
        ResumeKind.REFUSE,
        ResumeReason.G1_WAKEUPS_EXHAUSTED,
    )
    assert decision.ack and not decision.take_lease and not decision.fresh_node_budget
    assert "g1wakeups" in decision.detail


def test_retry_after_the_failure_cap_is_refused_as_deterministic_failure_exhausted() -> None:
    """Row 4 (W7, #73): twelve deterministic failures in a row stop wake-ups."""
    view = execution(ERROR, consecutive_failures=DETERMINISTIC_FAILURE_MAX)

    decision = decide(view, RETRY)

    assert (decision.kind, decision.reason) == (
        ResumeKind.REFUSE,
        ResumeReason.DETERMINISTIC_FAILURE_EXHAUSTED,
    )
    assert decision.ack and not decision.take_lease and "nofail" in decision.detail


def test_retry_on_an_errored_execution_whose_definition_drifted_is_refused_and_stays_error() -> (
    None
):
    """Row 5 (W7): the fingerprint check precedes the wake-up; fix the definition, then retry."""
    decision = decide(drifted(ERROR), RETRY)

    assert (decision.kind, decision.reason) == (ResumeKind.REFUSE, ResumeReason.DEFINITION_CHANGED)
    assert decision.ack and not decision.take_lease
    assert isinstance(decision.error, DefinitionDriftError)


def test_retry_on_an_errored_execution_wakes_it_with_a_fresh_node_budget() -> None:
    """Row 6 (W7, #73): under the lease, node retry counters cleared."""
    view = execution(
        ERROR, g1_wakeups=G1_MAX_WAKEUPS - 1, consecutive_failures=DETERMINISTIC_FAILURE_MAX - 1
    )

    decision = decide(view, RETRY)

    assert (decision.kind, decision.reason) == (ResumeKind.WAKE_UP, ResumeReason.WAKE_UP)
    assert decision.take_lease and decision.fresh_node_budget and not decision.ack
    assert decision.log_warning is None


def test_a_wake_up_names_the_counters_it_spends_one_wake_up_and_a_fresh_budget_for_all() -> None:
    """W7: the decision carries its counter changes; the worker applies them as they are."""
    decision = decide(execution(ERROR, g1_wakeups=1, stopped_at="charge"), RETRY)

    assert decision.counter_changes == (
        CounterChange(Counter.WAKEUPS, CounterOp.INCREMENT),
        CounterChange(Counter.ALL_NODE_RETRIES, CounterOp.RESET),
        CounterChange(Counter.ALL_NODE_CRASHES, CounterOp.RESET),
    )


@pytest.mark.parametrize(
    ("stopped_at", "restart"),
    [("charge", "charge"), (None, "request")],
    ids=["where-it-stopped", "never-ran-a-node"],
)
def test_a_wake_up_restarts_where_the_execution_stopped_or_at_the_start_node(
    stopped_at: str | None, restart: str
) -> None:
    """W7: the failed node (the error's, else the checkpoint's next node); an execution that
    failed before any node runs from the deployed start node."""
    current = attrs.evolve(DEPLOYED, start_node_id="request")
    view = execution(ERROR, node_id=None, stopped_at=stopped_at)

    decision = decide_resume(view, ResumeRequest(RETRY), current)

    assert decision.kind is ResumeKind.WAKE_UP and decision.restart_node_id == restart


def test_a_refused_wake_up_spends_nothing() -> None:
    decision = decide(execution(ERROR, g1_wakeups=G1_MAX_WAKEUPS, stopped_at="charge"), RETRY)

    assert decision.kind is ResumeKind.REFUSE
    assert (decision.counter_changes, decision.restart_node_id) == ((), None)


def test_the_view_of_a_failed_state_names_where_it_stopped() -> None:
    """W7, W23: ``stopped_at`` is the one rule a wake-up and an operator retry share."""
    failed = _state(
        status=ERROR, next_node_id="ship", error=ExecutionError(-500, "boom", node_id="charge")
    )
    assert ExecutionView.of(failed).stopped_at == "charge" == failed.stopped_at
    assert ExecutionView.of(attrs.evolve(failed, error=None)).stopped_at == "ship"
    assert ExecutionView.of(_state(next_node_id="ship")).stopped_at is None, "still running"


def test_the_wake_up_caps_default_to_2_and_12_and_can_be_configured() -> None:
    """W7: at most 2 wake-ups and 12 consecutive deterministic failures unless told otherwise."""
    assert WakeUpCaps() == WakeUpCaps(max_wakeups=2, max_consecutive_failures=12)
    view = execution(ERROR, g1_wakeups=2)

    decision = decide_resume(view, ResumeRequest(RETRY), DEPLOYED, WakeUpCaps(max_wakeups=3))

    assert decision.kind is ResumeKind.WAKE_UP


# --- rows 7-8: cancel -----------------------------------------------------------------


@pytest.mark.parametrize("status", [RUNNING, SUSPENDED])
def test_cancel_on_a_live_execution_cancels_under_the_lease(status: ExecutionStatus) -> None:
    """Row 7 (W7, W23): even a drifted definition cannot stop a cancel."""
    decision = decide(drifted(status), CANCEL)

    assert (decision.kind, decision.reason) == (ResumeKind.CANCEL, ResumeReason.CANCEL)
    assert decision.take_lease and not decision.ack


@pytest.mark.parametrize(
    ("status", "request_"),
    [(SUSPENDED, ResumeRequest(t)) for t in (CONTINUE, RETRY)]
    + [(SUSPENDED, ResumeRequest(EVENT, subscription_id="other"))]
    + [(RUNNING, ResumeRequest(t)) for t in (CONTINUE, RETRY, EVENT, TIMEOUT)],
)
def test_a_resume_of_a_live_execution_with_a_cancel_intent_cancels_under_the_lease(
    status: ExecutionStatus, request_: ResumeRequest
) -> None:
    """Row 8 (W7, W23): the flag wins over "already suspended", so a lost cancel
    carrier cannot leave the run suspended with its cancel intent forever."""
    decision = decide(execution(status, cancel_requested=True), request_)

    assert (decision.kind, decision.reason) == (ResumeKind.CANCEL, ResumeReason.CANCEL_REQUESTED)
    assert decision.take_lease


# --- rows 9-10: suspended + a carrier that cannot wake it -------------------------------


@pytest.mark.parametrize("resume_type", [CONTINUE, RETRY])
def test_continue_on_a_suspended_execution_is_already_suspended_and_takes_no_lease(
    resume_type: ResumeType,
) -> None:
    """Row 9 (W7, #33): a duplicate continue once turned a recoverable wait into an error."""
    decision = decide(drifted(SUSPENDED), resume_type)

    assert (decision.kind, decision.reason) == (
        ResumeKind.ALREADY_SUSPENDED,
        ResumeReason.ALREADY_SUSPENDED,
    )
    assert decision.ack and not decision.take_lease


@pytest.mark.parametrize(
    "request_",
    [
        ResumeRequest(EVENT, subscription_id="sub-0", event_id="ev-9"),
        ResumeRequest(EVENT, node_id="approve"),
        ResumeRequest(EVENT, subscription_id="sub-1", node_id="earlier"),
        ResumeRequest(EVENT),
        ResumeRequest(TIMEOUT, subscription_id="sub-0"),
        ResumeRequest(TIMEOUT, node_id="earlier"),
        ResumeRequest(TIMEOUT),
    ],
    ids=lambda r: f"{r.resume_type}-{r.subscription_id}-{r.node_id}",
)
def test_an_event_or_timeout_for_another_wait_is_a_protocol_error_that_changes_nothing(
    request_: ResumeRequest,
) -> None:
    """Row 10 (W7, #33/#221): acked with a ResumeProtocolError, state left as it is."""
    decision = decide(drifted(SUSPENDED), request_)

    assert (decision.kind, decision.reason) == (
        ResumeKind.PROTOCOL_ERROR,
        ResumeReason.NOT_THIS_SUSPENSION,
    )
    assert decision.ack and not decision.take_lease
    assert isinstance(decision.error, ResumeProtocolError)


def test_a_timeout_for_a_wait_without_a_pending_timer_is_a_protocol_error() -> None:
    """Row 10 (W7): an event node without a timeout cannot be timed out."""
    view = execution(SUSPENDED, wait=attrs.evolve(WAIT, timer_pending=False))

    assert decide(view, THIS_TIMEOUT).kind is ResumeKind.PROTOCOL_ERROR


def test_an_event_for_a_suspended_row_without_its_wait_is_a_protocol_error() -> None:
    """Row 10 (W7): a row that says suspended but names no wait can be woken by nothing."""
    decision = decide(execution(SUSPENDED, wait=None), THIS_EVENT)

    assert decision.kind is ResumeKind.PROTOCOL_ERROR
    assert "waits on nothing" in decision.detail


# --- row 11: breaking drift ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "request_"),
    [(SUSPENDED, THIS_EVENT), (SUSPENDED, THIS_TIMEOUT)]
    + [(RUNNING, ResumeRequest(t)) for t in (CONTINUE, RETRY, EVENT, TIMEOUT)],
)
def test_a_breaking_definition_drift_terminalises_a_live_execution_naming_both_hashes(
    status: ExecutionStatus, request_: ResumeRequest
) -> None:
    """Row 11 (W7, definition drift): an observable terminal error, not a redelivery storm."""
    decision = decide(drifted(status), request_)

    assert (decision.kind, decision.reason) == (
        ResumeKind.DEFINITION_DRIFT,
        ResumeReason.DEFINITION_CHANGED,
    )
    assert decision.take_lease
    assert isinstance(decision.error, DefinitionDriftError)
    assert "fp-old" in decision.detail and "fp-new" in decision.detail


# --- rows 12-15: proceed -----------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        THIS_EVENT,
        ResumeRequest(EVENT, subscription_id="sub-1", node_id="approve"),
        THIS_TIMEOUT,
        ResumeRequest(TIMEOUT, node_id="approve"),
    ],
    ids=lambda r: f"{r.resume_type}-{r.subscription_id}-{r.node_id}",
)
def test_the_event_or_timer_a_suspended_execution_waits_for_resumes_it(
    request_: ResumeRequest,
) -> None:
    """Row 12 (W7)."""
    decision = decide(execution(SUSPENDED), request_)

    assert (decision.kind, decision.reason) == (ResumeKind.PROCEED, ResumeReason.RESUME)
    assert decision.take_lease and decision.log_warning is None


def test_continue_on_a_running_execution_proceeds_under_the_lease() -> None:
    """Row 13 (W7)."""
    decision = decide(execution(RUNNING), CONTINUE)

    assert (decision.kind, decision.reason) == (ResumeKind.PROCEED, ResumeReason.CONTINUE)
    assert decision.take_lease and decision.log_warning is None


def test_retry_on_a_running_execution_continues_with_a_warning_even_with_caps_exhausted() -> None:
    """Row 14 (W7, #53): the caps apply to error only; refusing here was a false accept."""
    view = execution(RUNNING, g1_wakeups=99, consecutive_failures=99)

    decision = decide(view, RETRY)

    assert (decision.kind, decision.reason) == (
        ResumeKind.PROCEED_AS_CONTINUE,
        ResumeReason.RETRY_ON_RUNNING,
    )
    assert decision.take_lease and not decision.fresh_node_budget
    assert decision.log_warning is not None
    assert decision.log_warning.startswith("event=resume.retry_on_running execution_id=x-1")


@pytest.mark.parametrize(
    "request_", [THIS_EVENT, THIS_TIMEOUT, ResumeRequest(EVENT, subscription_id="long-gone")]
)
def test_a_stale_event_or_timeout_on_a_running_execution_is_normalised_to_continue(
    request_: ResumeRequest,
) -> None:
    """Row 15 (W7, #258): redelivered after its step was checkpointed; no node replays."""
    decision = decide(execution(RUNNING), request_)

    assert (decision.kind, decision.reason) == (
        ResumeKind.PROCEED_AS_CONTINUE,
        ResumeReason.STALE_CARRIER,
    )
    assert decision.take_lease and decision.log_warning is None


# --- definition drift ------------------------------------------------------------------


@pytest.mark.parametrize("recorded", [None, ""])
def test_a_row_without_a_recorded_fingerprint_skips_the_drift_check(recorded: str | None) -> None:
    """W7: rows written before fingerprints existed keep working (no flow hash: no check)."""
    view = execution(RUNNING, fingerprint=recorded, subgraph_fingerprint=None)

    assert compare_definitions(view, DEPLOYED) is DefinitionDrift.UNCHECKED
    assert decide(view, CONTINUE).kind is ResumeKind.PROCEED


def test_the_same_fingerprint_is_no_drift() -> None:
    assert compare_definitions(execution(RUNNING), DEPLOYED) is DefinitionDrift.NONE


def test_a_changed_fingerprint_without_a_recorded_subgraph_is_breaking() -> None:
    """W7: nothing proves the graph ahead is unchanged, so the strict rule applies: breaking."""
    view = execution(RUNNING, fingerprint="fp-old", subgraph_fingerprint=None)

    assert compare_definitions(view, DEPLOYED) is DefinitionDrift.BREAKING


@pytest.mark.parametrize(
    ("status", "request_", "kind"),
    [
        (SUSPENDED, THIS_EVENT, ResumeKind.PROCEED),
        (RUNNING, ResumeRequest(CONTINUE), ResumeKind.PROCEED),
        (RUNNING, ResumeRequest(RETRY), ResumeKind.PROCEED_AS_CONTINUE),
        (RUNNING, THIS_TIMEOUT, ResumeKind.PROCEED_AS_CONTINUE),
        (ERROR, ResumeRequest(RETRY), ResumeKind.WAKE_UP),
    ],
)
def test_an_unrelated_edit_is_tolerated_with_a_warning_naming_both_hashes(
    status: ExecutionStatus, request_: ResumeRequest, kind: ResumeKind
) -> None:
    """W7: deploying an edit elsewhere in the graph must not strand runs waiting at ``approve``."""
    view = execution(status, fingerprint="fp-old")

    decision = decide(view, request_)

    assert compare_definitions(view, DEPLOYED) is DefinitionDrift.TOLERATED
    assert decision.kind is kind
    assert decision.log_warning is not None
    assert "event=resume.definition_drift_tolerated" in decision.log_warning
    assert "recorded=fp-old current=fp-new" in decision.log_warning


# --- the view of a stored execution ------------------------------------------------------


def _state(**changes: Any) -> ExecutionState:
    state = ExecutionState.new(
        execution_id="x-1",
        flow_id="approval",
        flow_version="1",
        fingerprint="fp-new",
        start_node_id="request",
        input={},
        now_ms=0,
    )
    return attrs.evolve(state, **changes)


def test_the_view_of_a_suspended_state_names_its_wait_and_timer() -> None:
    suspension = Suspension(node_id="approve", subscription_id="sub-1", wake_at_ms=5)

    view = ExecutionView.of(
        _state(status=SUSPENDED, suspension=suspension),
        subgraph_fingerprint="sub-same",
        g1_wakeups=1,
        consecutive_failures=3,
        cancel_requested=True,
    )

    assert view == ExecutionView(
        execution_id="x-1",
        status=SUSPENDED,
        node_id="approve",
        wait=WAIT,
        fingerprint="fp-new",
        subgraph_fingerprint="sub-same",
        g1_wakeups=1,
        consecutive_failures=3,
        cancel_requested=True,
    )


def test_the_view_of_an_old_running_row_has_no_fingerprint_and_runs_its_next_node() -> None:
    view = ExecutionView.of(_state(fingerprint=""))

    assert (view.node_id, view.wait, view.fingerprint) == ("request", None, None)


# --- properties over every row ------------------------------------------------------------

ids = st.sampled_from([None, "", "sub-1", "sub-2", "approve", "other"])
hashes = st.sampled_from([None, "", "fp-old", "fp-new", "sub-old", "sub-same"])
waits = st.none() | st.builds(
    WaitView, node_id=st.sampled_from(["approve", "other"]), subscription_id=ids
)
views = st.builds(
    ExecutionView,
    execution_id=st.just("x-1"),
    status=st.sampled_from(ExecutionStatus),
    node_id=ids,
    wait=waits,
    fingerprint=hashes,
    subgraph_fingerprint=hashes,
    g1_wakeups=st.integers(-3, 20),
    consecutive_failures=st.integers(-3, 20),
    cancel_requested=st.booleans(),
)
requests = st.builds(
    ResumeRequest, st.sampled_from(ResumeType), subscription_id=ids, node_id=ids, event_id=ids
)
definitions = st.builds(
    CurrentDefinition,
    fingerprint=st.sampled_from(["fp-old", "fp-new"]),
    subgraph_fingerprint=hashes,
)
caps = st.builds(WakeUpCaps, st.integers(0, 5), st.integers(0, 15))
ACKED_KINDS = {
    ResumeKind.SHORT_CIRCUIT,
    ResumeKind.ALREADY_SUSPENDED,
    ResumeKind.REFUSE,
    ResumeKind.PROTOCOL_ERROR,
}


@given(views, requests, definitions, caps)
def test_every_combination_gets_a_decision_and_acks_exactly_when_it_takes_no_lease(
    view: ExecutionView, request: ResumeRequest, current: CurrentDefinition, limits: WakeUpCaps
) -> None:
    """W7 is total: every input returns a decision; normal outcomes never raise."""
    decision = decide_resume(view, request, current, limits)

    assert isinstance(decision.kind, ResumeKind) and isinstance(decision.reason, ResumeReason)
    assert decision.ack is (decision.kind in ACKED_KINDS)
    assert decision.ack is not decision.take_lease
    assert decision.fresh_node_budget is (decision.kind is ResumeKind.WAKE_UP)
    assert decision == decide_resume(view, request, current, limits)


@given(views, requests, definitions, caps)
def test_a_terminal_execution_never_changes_state_except_by_a_retry_wake_up(
    view: ExecutionView, request: ResumeRequest, current: CurrentDefinition, limits: WakeUpCaps
) -> None:
    """W7, R1 "terminal states absorb": only error + retry may leave a terminal status."""
    decision = decide_resume(view, request, current, limits)

    if view.status in (COMPLETED, CANCELLED):
        assert decision.kind is ResumeKind.SHORT_CIRCUIT
    if view.status is ERROR and decision.take_lease:
        assert decision.kind is ResumeKind.WAKE_UP and request.resume_type is RETRY
    if decision.kind is ResumeKind.WAKE_UP:
        assert view.g1_wakeups < limits.max_wakeups
        assert view.consecutive_failures < limits.max_consecutive_failures


@given(views, requests, definitions, caps)
def test_a_refused_wake_up_never_takes_a_lease(
    view: ExecutionView, request: ResumeRequest, current: CurrentDefinition, limits: WakeUpCaps
) -> None:
    """W7: exhausted → refused with a reason, no exception, state unchanged."""
    decision = decide_resume(view, request, current, limits)

    if decision.kind is ResumeKind.REFUSE:
        assert not decision.take_lease and decision.ack
        assert view.status is ERROR and request.resume_type is RETRY


@given(views, requests, definitions, caps)
def test_drift_with_an_unchanged_subgraph_never_terminalises(
    view: ExecutionView, request: ResumeRequest, current: CurrentDefinition, limits: WakeUpCaps
) -> None:
    """W7: an edit elsewhere in the graph never strands or ends a run."""
    view = attrs.evolve(view, subgraph_fingerprint=current.subgraph_fingerprint or "sub-same")
    current = attrs.evolve(current, subgraph_fingerprint=view.subgraph_fingerprint)

    decision = decide_resume(view, request, current, limits)

    assert decision.reason is not ResumeReason.DEFINITION_CHANGED
    assert decision.kind is not ResumeKind.DEFINITION_DRIFT


@given(views, requests, definitions, caps)
def test_a_suspended_execution_is_only_advanced_by_the_carrier_of_its_own_wait(
    view: ExecutionView, request: ResumeRequest, current: CurrentDefinition, limits: WakeUpCaps
) -> None:
    """W7, V6 and #33: continue/retry and stale carriers never push a wait forward."""
    decision = decide_resume(view, request, current, limits)

    if view.status is SUSPENDED and decision.kind is ResumeKind.PROCEED:
        assert view.wait is not None
        assert request.resume_type in (EVENT, TIMEOUT)
        assert request.subscription_id in (None, view.wait.subscription_id)
        assert request.node_id in (None, view.wait.node_id)
    if view.status is SUSPENDED:
        assert decision.kind is not ResumeKind.PROCEED_AS_CONTINUE


@given(views, requests, definitions, caps)
def test_a_cancel_intent_is_never_acked_away_on_a_live_execution(
    view: ExecutionView, request: ResumeRequest, current: CurrentDefinition, limits: WakeUpCaps
) -> None:
    """W7, W23 (the cancel intent wins): with the flag set a live execution is always cancelled."""
    view = attrs.evolve(view, cancel_requested=True)

    decision = decide_resume(view, request, current, limits)

    if view.status in (RUNNING, SUSPENDED):
        assert decision.kind is ResumeKind.CANCEL and decision.take_lease


# --- rows 10, 12, 14, 16 with branches and children (E12, E13, E14) --------------------

BRANCH_WAIT = WaitView(node_id="legal", subscription_id="sub-legal")


def test_a_running_executions_branch_wait_is_resumed_by_its_event() -> None:
    """Row 14: one branch runs while another waits; the waiting branch's event resumes it."""
    view = execution(RUNNING, node_id="finance", branch_waits=(BRANCH_WAIT,))
    decision = decide(view, ResumeRequest(EVENT, subscription_id="sub-legal", event_id="e"))
    assert (decision.kind, decision.reason) == (ResumeKind.PROCEED, ResumeReason.RESUME)
    stale = decide(view, ResumeRequest(EVENT, subscription_id="sub-gone", event_id="e"))
    assert stale.kind is ResumeKind.PROCEED_AS_CONTINUE  # row 16: no such wait


def test_a_suspended_executions_branch_waits_are_all_its_waits() -> None:
    """Rows 10 and 12: any branch's wait is this execution's; another is not."""
    view = execution(SUSPENDED, branch_waits=(WAIT, BRANCH_WAIT))
    legal = decide(view, ResumeRequest(EVENT, subscription_id="sub-legal", event_id="e"))
    assert legal.kind is ResumeKind.PROCEED
    other = decide(view, ResumeRequest(EVENT, subscription_id="sub-x", event_id="e"))
    assert other.kind is ResumeKind.PROTOCOL_ERROR


def test_a_child_carrier_resumes_only_a_wait_for_children() -> None:
    children = WaitView("each", "timer-1", timer_pending=True, children=True)
    assert decide(execution(SUSPENDED, wait=children), ResumeType.CHILD).kind is ResumeKind.PROCEED
    assert decide(execution(SUSPENDED), ResumeType.CHILD).kind is ResumeKind.PROTOCOL_ERROR


def test_a_child_notice_for_an_item_its_map_counted_already_is_acked_at_once() -> None:
    """Row 9a (E14): a duplicate notice, or one the parent's own look found first."""
    from plaita.domain.children import OnItemError, begin_map, child_ended

    step = begin_map(5, concurrency=2, on_item_error=OnItemError.FAIL)
    progress = child_ended(step.progress, index=1, ok=True).progress
    children = WaitView("each", "timer-1", timer_pending=True, children=True, map=progress)
    view = execution(SUSPENDED, wait=children)
    counted = decide(view, ResumeRequest(ResumeType.CHILD, child_index=1))
    assert (counted.kind, counted.reason) == (
        ResumeKind.ALREADY_SUSPENDED,
        ResumeReason.CHILD_COUNTED,
    )
    assert decide(view, ResumeRequest(ResumeType.CHILD, child_index=0)).kind is ResumeKind.PROCEED
