"""How domain values read in the API: executions with their timeline, flows as graphs."""

from __future__ import annotations

from typing import Any

from plaita.application.use_cases.operator_controls.listing import ExecutionListing
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import (
    BaseNode,
    EndNode,
    EventNode,
    Flow,
    HttpNode,
    IfNode,
    MapNode,
    ParallelNode,
    SleepNode,
    SubflowNode,
    SwitchNode,
    TaskNode,
)
from plaita.domain.flow_control import Waiting
from plaita.domain.flow_owners import FlowOwner
from plaita.domain.operator_actions import available_actions
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.tokens import WaitFor
from plaita.entrypoints.console import schemas

JSON = Any
_OPEN = (ExecutionStatus.RUNNING, ExecutionStatus.SUSPENDED)


def summary(state: ExecutionState, flags: ControlFlags) -> schemas.ExecutionSummary:
    return schemas.ExecutionSummary(**_summary_fields(state, flags))


def page(listing: ExecutionListing) -> schemas.ExecutionPage:
    return schemas.ExecutionPage(
        items=[summary(state, flags) for state, flags in listing.items],
        next_cursor=listing.next_cursor,
    )


def detail(
    state: ExecutionState, flags: ControlFlags, held_back: Waiting | None = None
) -> schemas.ExecutionDetail:
    suspension = state.suspension
    return schemas.ExecutionDetail(
        **_summary_fields(state, flags),
        input=dict(state.input),
        variables=dict(state.variables),
        result=state.result,
        node_results=dict(state.node_results),
        steps=state.steps,
        waiting_for=None
        if suspension is None
        else schemas.WaitingFor(
            node_id=suspension.node_id,
            subscription_id=suspension.subscription_id,
            wake_at_ms=suspension.wake_at_ms,
            child_id=suspension.child_id,
            children=None
            if suspension.map is None
            else schemas.ChildrenProgressView(
                total=suspension.map.total,
                started=suspension.map.started,
                succeeded=suspension.map.succeeded,
                failed=suspension.map.failed,
            ),
        ),
        held_back=None
        if held_back is None or state.is_terminal
        else schemas.HeldBackView(**held_back.as_dict()),
        parent=None
        if state.parent is None
        else schemas.ParentView(
            execution_id=state.parent.execution_id,
            node_id=state.parent.node_id,
            index=state.parent.index,
        ),
        timeline=timeline(state),
        actions={
            action.value: schemas.ActionAvailabilityView(**found.to_json())
            for action, found in available_actions(state.status, flags).items()
        },
    )


def _summary_fields(state: ExecutionState, flags: ControlFlags) -> dict[str, JSON]:
    error = state.error
    return {
        "execution_id": state.execution_id,
        "flow_id": state.flow_id,
        "flow_version": state.flow_version,
        "tenant_id": state.tenant_id,
        "status": state.status,
        "paused": flags.paused,
        "cancel_requested": flags.cancel_requested,
        "parked": flags.parked,
        "next_node_id": state.next_node_id,
        "last_node_id": state.last_node_id,
        "created_at_ms": state.created_at_ms,
        "updated_at_ms": state.updated_at_ms,
        "error": None
        if error is None
        else schemas.ExecutionErrorView(
            code=error.code, message=error.message, node_id=error.node_id, kind=error.kind
        ),
        "last_failure": None
        if state.last_failure is None
        else schemas.NodeFailureView(**state.last_failure.to_json()),
        "parent_id": None if state.parent is None else state.parent.execution_id,
    }


def timeline(state: ExecutionState) -> list[schemas.TimelineEntry]:
    """The nodes the execution went through, oldest first, and the one open now.

    From the per-node timings when the checkpoint has them; older checkpoints only know
    which nodes produced a result, in order, without times.
    """
    timings = state.node_timings
    entries: list[schemas.TimelineEntry] = []
    if timings:
        # Several nodes often start within one millisecond: the sort is stable, so they keep
        # the order the checkpoint recorded them in, and an open node goes after them.
        ordered = sorted(
            timings.items(),
            key=lambda item: (item[1].started_at_ms, item[1].ended_at_ms is None),
        )
        for node_id, timing in ordered:
            entries.append(
                schemas.TimelineEntry(
                    node_id=node_id,
                    started_at_ms=timing.started_at_ms,
                    ended_at_ms=timing.ended_at_ms,
                    status=_status_of(state, node_id, ended=timing.ended_at_ms is not None),
                )
            )
    else:
        for node_id in state.node_results:
            entries.append(
                schemas.TimelineEntry(
                    node_id=node_id,
                    started_at_ms=None,
                    ended_at_ms=None,
                    status=_status_of(state, node_id, ended=True),
                )
            )
        failed = state.error.node_id if state.error is not None else None
        if failed is not None and failed not in state.node_results:
            entries.append(
                schemas.TimelineEntry(
                    node_id=failed, started_at_ms=None, ended_at_ms=None, status="failed"
                )
            )
    current = _open_node(state)
    if current is not None and not any(
        entry.node_id == current and entry.ended_at_ms is None and entry.status != "completed"
        for entry in entries
    ):
        entries = [entry for entry in entries if entry.node_id != current or timings]
        entries.append(
            schemas.TimelineEntry(
                node_id=current,
                started_at_ms=state.updated_at_ms,
                ended_at_ms=None,
                status="waiting" if state.status is ExecutionStatus.SUSPENDED else "running",
            )
        )
    return entries


def _open_node(state: ExecutionState) -> str | None:
    if state.status not in _OPEN:
        return None
    if state.status is ExecutionStatus.SUSPENDED and state.suspension is not None:
        return state.suspension.node_id
    return state.next_node_id


def _status_of(state: ExecutionState, node_id: str, *, ended: bool) -> schemas.NodeStatus:
    if state.error is not None and state.error.node_id == node_id:
        return "failed"
    if ended:
        return "completed"
    if state.status is ExecutionStatus.SUSPENDED:
        return "waiting"
    return "running"


# --- flows --------------------------------------------------------------------------------


def flow_summary(flow: Flow, owner: FlowOwner) -> schemas.FlowSummary:
    return schemas.FlowSummary(
        flow_id=flow.flow_id,
        version=flow.version,
        fingerprint=flow.fingerprint,
        node_count=sum(1 for _ in flow.nodes()),
        tenant_id=owner.tenant_id,
        shared=owner.shared,
    )


def flow_detail(flow: Flow, owner: FlowOwner) -> schemas.FlowDetail:
    nodes = list(flow.nodes())
    return schemas.FlowDetail(
        flow_id=flow.flow_id,
        version=flow.version,
        fingerprint=flow.fingerprint,
        tenant_id=owner.tenant_id,
        shared=owner.shared,
        document=flow.to_document(),
        graph=schemas.FlowGraph(
            nodes=[
                schemas.GraphNode(id=node.id, type=node.type, label=_label(node)) for node in nodes
            ],
            edges=[
                schemas.GraphEdge(from_=node.id, to=target, label=role)
                for node in nodes
                for target, role in edges_of(node)
            ],
        ),
    )


def edges_of(node: BaseNode) -> list[tuple[str, str]]:
    """Each target of ``node`` with the role of its edge (the field that names it)."""
    if isinstance(node, IfNode):
        return [(node.then, "then"), (node.else_, "else")]
    if isinstance(node, SwitchNode):
        cases = [(case.next, case.when) for case in node.cases]
        return cases + ([(node.default, "default")] if node.default is not None else [])
    if isinstance(node, EventNode):
        timeout = [(node.timeout_next, "timeout_next")] if node.timeout_next is not None else []
        return [(node.next, "next"), *timeout]
    if isinstance(node, TaskNode | SleepNode | HttpNode):
        return [(node.next, "next")]
    if isinstance(node, ParallelNode):
        # The branches start here; the join is where they meet (no path of its own).
        return [*((start, "branch") for start in node.branches), (node.join, "join")]
    # A node type added later still shows its edges, even without a role of its own.
    return [(target, "next") for target in node.targets()]


def _label(node: BaseNode) -> str:
    if isinstance(node, TaskNode):
        return node.handler
    if isinstance(node, IfNode):
        return node.condition
    if isinstance(node, SwitchNode):
        return f"switch ({len(node.cases)} cases)"
    if isinstance(node, EventNode):
        return f"wait for {node.event_type}"
    if isinstance(node, SleepNode):
        return f"sleep {node.duration}"
    if isinstance(node, HttpNode):
        return f"{node.method} {node.url}"
    if isinstance(node, ParallelNode):
        first = ", first wins" if node.wait is WaitFor.ANY else ""
        return f"{len(node.branches)} branches{first}"
    if isinstance(node, SubflowNode):
        return f"subflow → {node.flow_id}"
    if isinstance(node, MapNode):
        return f"map \N{MULTIPLICATION SIGN} {node.flow_id} ({node.concurrency} at a time)"
    if isinstance(node, EndNode):
        return "end" if node.output is None else f"end: {node.output}"
    return node.type
