"""What one step does to an execution's checkpoint (W1, S3): ``apply_step``.

The engine runs a node; this is the one rule for what the checkpoint says after it — the
context the node left, the node's timing, one step more, and where the execution is now:
suspended at a wait, completed with a result, or running at its next node (with the
fingerprint of the graph from there, for the drift check of W7).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from plaita.domain import tokens
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.errors import TokenStateError
from plaita.domain.execution import (
    JSON,
    ExecutionState,
    ExecutionStatus,
    Suspension,
    node_timing,
)
from plaita.domain.flow import Flow, ParallelNode
from plaita.domain.tokens import OpenFork, Token, TokenStatus

#: The result a branch ``wait: any`` left behind records at the node it had reached (E12).
CANCELLED_MARKER: Mapping[str, JSON] = {"cancelled": True}


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
    """``state`` after ``step``, which began at ``started_ms`` and ended at ``now_ms``.

    While a ``parallel`` node's fork is open, the step moved one branch's token, and where
    the execution stands is the fork's to say (``_fork_position``, E12)."""
    fork = state.fork
    token = None if fork is None else fork.at(step.node_id)
    resumed = state.status is ExecutionStatus.SUSPENDED or (
        token is not None and token.status is TokenStatus.WAITING
    )
    timings = dict(state.node_timings)
    timings[step.node_id] = node_timing(
        state.node_timings.get(step.node_id),
        started_ms=started_ms,
        now_ms=now_ms,
        resumed=resumed,
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
    node = flow.node(step.node_id) if flow.has_node(step.node_id) else None
    if fork is None and isinstance(node, ParallelNode):
        opened = tokens.fork(node.id, node.branches, join=node.join, wait=node.wait)
        return _fork_position(advanced, opened, flow=flow, now_ms=now_ms)
    if fork is not None and token is not None:
        return _fork_position(advanced, _moved(fork, token, step), flow=flow, now_ms=now_ms)
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


def _moved(fork: OpenFork, token: Token, step: StepRecord) -> OpenFork:
    """The fork after ``step`` ran ``token``'s node (resuming it first, if it waited)."""
    if token.status is TokenStatus.WAITING:
        fork = tokens.resume(fork, token.token_id, node_id=token.node_id).state
    if step.suspension is not None:
        return tokens.suspend(fork, token.token_id, step.suspension)
    if step.next_node_id is None:
        raise TokenStateError(
            f"node {step.node_id!r} ended the flow inside branch {token.token_id!r}, which "
            "can only go on or wait"
        )
    return tokens.advance(fork, token.token_id, step.next_node_id)


def _fork_position(
    state: ExecutionState, fork: OpenFork, *, flow: Flow, now_ms: int
) -> ExecutionState:
    """Where an execution with ``fork`` stands: at its join once due (the fork closed, every
    token ``wait: any`` left behind recorded as cancelled at its node), at its next ready
    branch, or suspended while every branch waits or arrived."""
    if fork.join_due:
        left = tokens.run_join(fork).cancelled
        results = dict(state.node_results)
        for token in left:
            results[token.node_id] = dict(CANCELLED_MARKER)
        return state.transition(
            ExecutionStatus.RUNNING,
            now_ms=now_ms,
            fork=None,
            node_results=results,
            next_node_id=fork.join_node_id,
            subgraph_fingerprint=flow.subgraph_fingerprint(fork.join_node_id),
        )
    if fork.ready:
        at = fork.ready[0].node_id
        return state.transition(
            ExecutionStatus.RUNNING,
            now_ms=now_ms,
            fork=fork,
            next_node_id=at,
            subgraph_fingerprint=flow.subgraph_fingerprint(at),
        )
    waiting = fork.waits[0]
    return state.transition(
        ExecutionStatus.SUSPENDED,
        now_ms=now_ms,
        fork=fork,
        suspension=waiting,
        next_node_id=waiting.node_id,
        subgraph_fingerprint=flow.subgraph_fingerprint(waiting.node_id),
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
