"""What one step does to an execution's checkpoint (W1, S3): ``apply_step``.

The engine runs a node; this is the one rule for what the checkpoint says after it — the
context the node left, the node's timing, one step more, and where the execution is now:
suspended at a wait, completed with a result, or running at its next node (with the
fingerprint of the graph from there, for the drift check of W7).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from plaita.domain.envelope import TaskEnvelope
from plaita.domain.execution import (
    JSON,
    ExecutionState,
    ExecutionStatus,
    Suspension,
    node_timing,
)
from plaita.domain.flow import Flow


@attrs.frozen
class StepRecord:
    """What one engine step produced, as the checkpoint needs it."""

    node_id: str
    #: The execution's context after the step: variables, node results, last node and branch.
    variables: Mapping[str, JSON]
    node_results: Mapping[str, JSON]
    last_node_id: str | None
    last_branch: str | None
    #: Exactly one of: a suspension, the end (with ``result``), or the next node.
    suspension: Suspension | None = None
    is_end: bool = False
    result: JSON = None
    next_node_id: str | None = None

    def __attrs_post_init__(self) -> None:
        ways = (self.suspension is not None) + self.is_end + (self.next_node_id is not None)
        if ways != 1:
            raise ValueError(
                f"step of node {self.node_id!r} must suspend, end or name its next node, "
                f"exactly one of them (got {ways})"
            )


def apply_step(
    state: ExecutionState, step: StepRecord, *, flow: Flow, started_ms: int, now_ms: int
) -> ExecutionState:
    """``state`` after ``step``, which began at ``started_ms`` and ended at ``now_ms``."""
    timings = dict(state.node_timings)
    timings[step.node_id] = node_timing(
        state.node_timings.get(step.node_id),
        started_ms=started_ms,
        now_ms=now_ms,
        resumed=state.status is ExecutionStatus.SUSPENDED,
        suspended=step.suspension is not None,
    )
    advanced = attrs.evolve(
        state,
        variables=dict(step.variables),
        node_results=dict(step.node_results),
        last_node_id=step.last_node_id,
        last_branch=step.last_branch,
        steps=state.steps + 1,
        node_timings=timings,
        # The failed node has run: its failure is history now (ADR 0022).
        last_failure=(
            None
            if state.last_failure is not None and state.last_failure.node_id == step.node_id
            else state.last_failure
        ),
    )
    if step.suspension is not None:
        return advanced.transition(
            ExecutionStatus.SUSPENDED,
            now_ms=now_ms,
            suspension=step.suspension,
            next_node_id=step.node_id,
            subgraph_fingerprint=flow.subgraph_fingerprint(step.node_id),
        )
    if step.is_end:
        return advanced.transition(
            ExecutionStatus.COMPLETED, now_ms=now_ms, result=step.result, next_node_id=None
        )
    assert step.next_node_id is not None
    return advanced.transition(
        ExecutionStatus.RUNNING,
        now_ms=now_ms,
        next_node_id=step.next_node_id,
        subgraph_fingerprint=flow.subgraph_fingerprint(step.next_node_id),
    )


def first_state(
    start: TaskEnvelope, flow: Flow, *, now_ms: int, status: ExecutionStatus
) -> ExecutionState:
    """The state a start carrier's execution begins with: at ``flow``'s start node, with the
    fingerprints of the whole graph and of the graph from there (W7) and the start's dedup
    key (W6) — ``pending`` when a start is accepted, ``running`` when a worker builds it."""
    state = ExecutionState.new(
        execution_id=start.execution_id,
        flow_id=flow.flow_id,
        flow_version=flow.version,
        fingerprint=flow.fingerprint,
        start_node_id=flow.start_node.id,
        input=start.params,
        now_ms=now_ms,
        tenant_id=start.tenant_id,
        status=status,
    )
    return attrs.evolve(
        state,
        subgraph_fingerprint=flow.subgraph_fingerprint(flow.start_node.id),
        dedup_key=start.dedup_key,
    )
