"""Parallel branches in Normal and Generator modes (E12): the branches run as tasks of this
process over one context, each waits for its own event, the join runs once after all (or
the first, ``wait: any``, the others recorded as cancelled); the structural rules refuse a
fork at registration with named errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plaita.adapters.memory.event_bus import MemoryEventBus
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.domain.errors import (
    BranchesCrossError,
    BranchLeavesWithoutJoinError,
    InvalidForkError,
    NodeInTwoBranchesError,
)
from plaita.domain.events import Event
from plaita.domain.flow import Flow

from .conftest import FakeClock, SequentialIds, handler_registry


def fork(wait: str = "all", **legal: Any) -> dict[str, Any]:
    return {
        "flow_id": "fan",
        "start": "fan",
        "nodes": [
            {
                "id": "fan",
                "type": "parallel",
                "branches": ["legal", "finance"],
                "join": "both",
                "wait": wait,
            },
            {"id": "legal", "type": "event", "event_type": "legal.ok", "next": "both", **legal},
            {"id": "finance", "type": "task", "handler": "t:slow", "next": "both"},
            {
                "id": "both",
                "type": "end",
                "output": "{'legal': NODE['legal'], 'finance': NODE['finance']}",
            },
        ],
    }


async def slow(params: Any, ctx: Any) -> str:
    await asyncio.sleep(0.01)
    return "paid"


def execution(
    document: dict[str, Any], mode: str = "normal"
) -> tuple[FlowExecution, MemoryEventBus]:
    clock, ids = FakeClock(), SequentialIds()
    bus = MemoryEventBus()
    run = FlowExecution(
        Flow.from_document(document),
        ExecutionContext(execution_id="x-1", flow_id="fan"),
        handlers=handler_registry(slow=slow),
        clock=clock,
        new_id=ids.new_id,
        options=RunOptions(mode=mode),  # type: ignore[arg-type]
        event_waiter=bus,
    )
    return run, bus


async def test_both_branches_run_and_the_join_sees_both() -> None:
    run, bus = execution(fork())
    waiting = asyncio.ensure_future(run.arun())
    await asyncio.sleep(0.02)  # finance finished; legal still waits for its event
    assert not waiting.done()
    await bus.publish(Event("e-1", "legal.ok", 0, {"ok": 1}, correlation_id="x-1"))
    result = await asyncio.wait_for(waiting, 5)
    assert result["finance"] == "paid" and result["legal"]["data"] == {"ok": 1}


async def test_wait_any_cancels_the_branch_left_behind() -> None:
    run, _ = execution(fork("any"))
    result = await asyncio.wait_for(run.arun(), 5)
    assert result == {"legal": {"cancelled": True}, "finance": "paid"}


async def test_generator_mode_yields_each_branch_node_once() -> None:
    run, bus = execution(fork(), mode="generator")
    await bus.publish(Event("e-1", "legal.ok", 0, {}, correlation_id="x-1"))
    nodes = [output.node_id async for output in run.aiter_nodes()]
    assert nodes[0] == "fan" and nodes[-1] == "both"
    assert sorted(nodes[1:-1]) == ["finance", "legal"]


def node(id: str, **fields: Any) -> dict[str, Any]:
    return {"id": id, **fields}


@pytest.mark.parametrize(
    ("nodes", "error", "message"),
    [
        ([node("a", type="end")], BranchLeavesWithoutJoinError, "can end at 'a'"),
        (
            [node("a", type="task", handler="t:f", next="b")],
            BranchesCrossError,
            "runs into the start of branch 'b'",
        ),
        (
            [node("a", type="task", handler="t:f", next="shared")],
            NodeInTwoBranchesError,
            "node 'shared' is in branch",
        ),
        (
            [node("a", type="parallel", branches=["x", "y"], join="j")],
            InvalidForkError,
            "holds parallel node 'a'",
        ),
    ],
)
def test_a_fork_that_breaks_a_rule_is_refused_by_name(
    nodes: list[dict[str, Any]], error: type[Exception], message: str
) -> None:
    others = [
        node("b", type="task", handler="t:f", next="shared"),
        node("shared", type="task", handler="t:f", next="j"),
        node("x", type="task", handler="t:f", next="j"),
        node("y", type="task", handler="t:f", next="j"),
        node("j", type="end"),
    ]
    document = {
        "flow_id": "bad",
        "start": "fan",
        "nodes": [node("fan", type="parallel", branches=["a", "b"], join="j"), *nodes, *others],
    }
    with pytest.raises(error, match=message):
        Flow.from_document(document)
