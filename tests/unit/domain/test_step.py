"""``apply_step``: what one step does to an execution's checkpoint (W1, S3, C2)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from plaita.domain.execution import (
    ExecutionState,
    ExecutionStatus,
    NodeFailure,
    NodeTiming,
    Suspension,
)
from plaita.domain.flow import Flow
from plaita.domain.step import StepRecord, apply_step

FLOW = Flow.from_document(
    {
        "flow_id": "approval",
        "start": "request",
        "nodes": [
            {"id": "request", "type": "task", "handler": "t:request", "next": "wait"},
            {"id": "wait", "type": "event", "event_type": "decision", "next": "done"},
            {"id": "done", "type": "end"},
        ],
    }
)


def running(**changes: Any) -> ExecutionState:
    state = ExecutionState.new(
        execution_id="x-1",
        flow_id="approval",
        flow_version="1",
        fingerprint=FLOW.fingerprint,
        start_node_id="request",
        input={"amount": 5},
        now_ms=0,
    )
    return attrs.evolve(state, **changes)


def record(node_id: str, **outcome: Any) -> StepRecord:
    return StepRecord(
        node_id=node_id,
        variables={"v": 1},
        node_results={node_id: {"ok": True}},
        last_node_id=node_id,
        last_branch=None,
        **outcome,
    )


def test_a_step_to_the_next_node_keeps_running_there_with_the_graphs_fingerprint() -> None:
    after = apply_step(
        running(), record("request", next_node_id="wait"), flow=FLOW, started_ms=10, now_ms=15
    )

    assert (after.status, after.next_node_id, after.steps) == (ExecutionStatus.RUNNING, "wait", 1)
    assert after.subgraph_fingerprint == FLOW.subgraph_fingerprint("wait")
    assert (after.variables, after.node_results) == ({"v": 1}, {"request": {"ok": True}})
    assert after.last_node_id == "request" and after.updated_at_ms == 15
    assert after.node_timings["request"] == NodeTiming(10, 15)


def test_a_step_that_suspends_waits_at_its_node_and_its_timing_stays_open() -> None:
    wait = Suspension("wait", "sub-1", None)
    state = running(next_node_id="wait", steps=1)

    after = apply_step(state, record("wait", suspension=wait), flow=FLOW, started_ms=20, now_ms=21)

    assert (after.status, after.suspension, after.next_node_id) == (
        ExecutionStatus.SUSPENDED,
        wait,
        "wait",
    )
    assert after.subgraph_fingerprint == FLOW.subgraph_fingerprint("wait")
    assert after.node_timings["wait"] == NodeTiming(20, None), "still open while it waits"


def test_a_resumed_wait_keeps_the_start_of_its_wait() -> None:
    """C2: the wait's timing spans the suspension."""
    suspended = running(
        status=ExecutionStatus.SUSPENDED,
        next_node_id="wait",
        suspension=Suspension("wait", "sub-1", None),
        node_timings={"wait": NodeTiming(20, None)},
    )

    after = apply_step(
        suspended, record("wait", next_node_id="done"), flow=FLOW, started_ms=90, now_ms=95
    )

    assert after.status is ExecutionStatus.RUNNING and after.suspension is None
    assert after.node_timings["wait"] == NodeTiming(20, 95)


def test_a_step_that_ends_completes_with_its_result_and_no_next_node() -> None:
    state = running(next_node_id="done", steps=2)

    after = apply_step(
        state, record("done", is_end=True, result="shipped"), flow=FLOW, started_ms=30, now_ms=31
    )

    assert (after.status, after.result, after.next_node_id, after.steps) == (
        ExecutionStatus.COMPLETED,
        "shipped",
        None,
        3,
    )


@pytest.mark.parametrize(
    "outcome",
    [
        {},
        {"is_end": True, "next_node_id": "done"},
        {"suspension": Suspension("wait", "s", None), "next_node_id": "done"},
    ],
    ids=["none", "end-and-next", "suspend-and-next"],
)
def test_a_step_record_says_exactly_one_of_suspend_end_or_next(outcome: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        record("request", **outcome)


FAILED_REQUEST = NodeFailure.of(
    node_id="request",
    attempt=2,
    error_class="ConnectionError",
    message="refused",
    transient=True,
    at_ms=3,
    retry_at_ms=8,
)


def test_the_failed_nodes_success_clears_its_last_failure() -> None:
    """ADR 0022: the summary shows a failure until the node that failed has run."""
    after = apply_step(
        running(last_failure=FAILED_REQUEST),
        record("request", next_node_id="wait"),
        flow=FLOW,
        started_ms=10,
        now_ms=15,
    )
    assert after.last_failure is None


def test_another_nodes_step_keeps_the_last_failure() -> None:
    state = running(next_node_id="wait", steps=1, last_failure=FAILED_REQUEST)
    after = apply_step(
        state,
        record("wait", suspension=Suspension("wait", "sub-1", None)),
        flow=FLOW,
        started_ms=10,
        now_ms=15,
    )
    assert after.last_failure == FAILED_REQUEST


FORKED = Flow.from_document(
    {
        "flow_id": "approval",
        "start": "fan",
        "nodes": [
            {"id": "fan", "type": "parallel", "branches": ["legal", "finance"], "join": "both"},
            {"id": "legal", "type": "event", "event_type": "legal.ok", "next": "both"},
            {"id": "finance", "type": "task", "handler": "t:f", "next": "both"},
            {"id": "both", "type": "end"},
        ],
    }
)


def forked(wait: str = "all") -> Flow:
    document = FORKED.to_document()
    document["nodes"][0]["wait"] = wait
    return Flow.from_document(document)


def test_a_parallel_node_opens_its_fork_at_the_first_branch() -> None:
    """E12: one token per branch, the execution running at the first ready one."""
    after = apply_step(
        running(next_node_id="fan"),
        record("fan", next_node_id="legal"),
        flow=FORKED,
        started_ms=1,
        now_ms=2,
    )
    assert after.fork is not None and [t.node_id for t in after.fork.ready] == ["legal", "finance"]
    assert (after.status, after.next_node_id) == (ExecutionStatus.RUNNING, "legal")


def test_a_branch_that_waits_lets_the_next_branch_run_then_the_execution_suspends() -> None:
    flow = forked()
    state = apply_step(
        running(next_node_id="fan"),
        record("fan", next_node_id="legal"),
        flow=flow,
        started_ms=1,
        now_ms=2,
    )
    legal = Suspension("legal", "sub-legal", None)
    state = apply_step(state, record("legal", suspension=legal), flow=flow, started_ms=3, now_ms=4)
    assert (state.status, state.next_node_id) == (ExecutionStatus.RUNNING, "finance")
    assert state.waits == (legal,) and state.wait_of("sub-legal") == legal
    state = apply_step(
        state, record("finance", next_node_id="both"), flow=flow, started_ms=5, now_ms=6
    )
    assert (state.status, state.suspension) == (ExecutionStatus.SUSPENDED, legal)
    # The event resumes the waiting branch; both arrived: the join is next, the fork closed.
    state = apply_step(
        state, record("legal", next_node_id="both"), flow=flow, started_ms=7, now_ms=8
    )
    assert (state.status, state.next_node_id, state.fork) == (
        ExecutionStatus.RUNNING,
        "both",
        None,
    )
    assert state.node_timings["legal"] == NodeTiming(3, 8), "the wait spans its suspension"


def test_wait_any_joins_after_the_first_branch_and_records_the_others_cancelled() -> None:
    flow = forked("any")
    state = apply_step(
        running(next_node_id="fan"),
        record("fan", next_node_id="legal"),
        flow=flow,
        started_ms=1,
        now_ms=2,
    )
    state = apply_step(
        state,
        record("legal", suspension=Suspension("legal", "sub-legal", None)),
        flow=flow,
        started_ms=3,
        now_ms=4,
    )
    state = apply_step(
        state, record("finance", next_node_id="both"), flow=flow, started_ms=5, now_ms=6
    )
    assert (state.next_node_id, state.fork, state.waits) == ("both", None, ())
    assert state.node_results["legal"] == {"cancelled": True}


def test_the_json_form_keeps_an_open_fork() -> None:
    flow = forked()
    state = apply_step(
        running(next_node_id="fan"),
        record("fan", next_node_id="legal"),
        flow=flow,
        started_ms=1,
        now_ms=2,
    )
    state = apply_step(
        state,
        record("legal", suspension=Suspension("legal", "s", 9)),
        flow=flow,
        started_ms=3,
        now_ms=4,
    )
    assert ExecutionState.from_json(state.to_json()) == state
