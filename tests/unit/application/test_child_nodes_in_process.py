"""Subflow and map nodes in Normal and Generator modes (E13, E14): children run in this
process, a map's ``concurrency`` at a time, results in item order, failures through the
node's errorHandler — the same results a worker gives (see test_child_nodes_on_a_worker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.domain.errors import InvalidChildNodeError, InvalidFlowDocumentError, UnknownFlowError
from plaita.domain.failures import ChildExecutionError, NodeExecutionError
from plaita.domain.flow import Flow

from .conftest import FakeClock, SequentialIds, handler_registry

DOUBLE = Flow.from_document(
    {
        "flow_id": "double",
        "start": "d",
        "nodes": [
            {
                "id": "d",
                "type": "task",
                "handler": "t:double",
                "params": {"n": "${item}"},
                "next": "out",
            },
            {"id": "out", "type": "end"},
        ],
    }
)
KYC = Flow.from_document(
    {
        "flow_id": "kyc",
        "start": "check",
        "nodes": [
            {
                "id": "check",
                "type": "task",
                "handler": "t:kyc",
                "params": {"who": "${name}"},
                "next": "out",
            },
            {"id": "out", "type": "end"},
        ],
    }
)


def parent(node: dict[str, Any]) -> Flow:
    return Flow.from_document(
        {
            "flow_id": "parent",
            "start": node["id"],
            "nodes": [{**node, "next": "done"}, {"id": "done", "type": "end"}],
        }
    )


def each(**fields: Any) -> Flow:
    return parent(
        {"id": "each", "type": "map", "items": "$input.items", "flow_id": "double", **fields}
    )


class Handlers:
    def __init__(self) -> None:
        self.running = 0
        self.most_running = 0

    async def double(self, params: dict[str, Any], ctx: Any) -> int:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(0.001 * (7 - params["n"] % 7))  # end out of order
            if params["n"] < 0:
                raise ValueError(f"negative {params['n']}")
            return int(params["n"]) * 2
        finally:
            self.running -= 1

    @staticmethod
    def kyc(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if params["who"] == "mallory":
            raise ValueError("not cleared")
        return {"cleared": params["who"]}


def run(
    flow: Flow, params: dict[str, Any], handlers: Handlers | None = None, *, mode: str = "normal"
) -> Any:
    handlers = handlers or Handlers()
    flows = {f.flow_id: f for f in (DOUBLE, KYC)}

    async def resolve(flow_id: str, version: str | None) -> Flow:
        if flow_id not in flows:
            raise UnknownFlowError(f"flow {flow_id!r} is not registered")
        return flows[flow_id]

    execution = FlowExecution(
        flow,
        ExecutionContext(execution_id="p-1", flow_id=flow.flow_id, input=params),
        handlers=handler_registry(double=handlers.double, kyc=handlers.kyc),
        clock=FakeClock(),
        new_id=SequentialIds().new_id,
        options=RunOptions(mode=mode),  # type: ignore[arg-type]
        child_flows=resolve,
    )
    if mode == "generator":
        return [output.to_json() for output in execution.iter_nodes()]
    return execution.run()


def test_a_subflow_node_takes_its_childs_output() -> None:
    flow = parent(
        {"id": "kyc", "type": "subflow", "flow_id": "kyc", "input": {"name": "${input.name}"}}
    )
    assert run(flow, {"name": "ada"}) == {"cleared": "ada"}


def test_a_subflow_childs_error_fails_the_node_through_its_error_handler() -> None:
    flow = parent(
        {"id": "kyc", "type": "subflow", "flow_id": "kyc", "input": {"name": "${input.name}"}}
    )
    with pytest.raises(NodeExecutionError, match=r"child execution p-1\.kyc error") as caught:
        run(flow, {"name": "mallory"})
    assert isinstance(caught.value.__cause__, ChildExecutionError)
    forgiving = parent(
        {
            "id": "kyc",
            "type": "subflow",
            "flow_id": "kyc",
            "input": {"name": "${input.name}"},
            "errorHandler": {"strategy": "continue_with", "default": "manual"},
        }
    )
    assert run(forgiving, {"name": "mallory"}) == "manual"


def test_a_subflow_of_an_unknown_flow_is_a_named_failure() -> None:
    flow = parent({"id": "kyc", "type": "subflow", "flow_id": "nowhere"})
    with pytest.raises(NodeExecutionError, match="'nowhere' is not registered"):
        run(flow, {})


def test_a_map_returns_the_outputs_in_item_order_within_its_concurrency() -> None:
    handlers = Handlers()
    items = list(range(20))
    assert run(each(concurrency=3), {"items": items}, handlers) == [n * 2 for n in items]
    assert handlers.most_running == 3


def test_an_empty_map_returns_an_empty_list() -> None:
    assert run(each(), {"items": []}) == []


def test_a_map_that_fails_stops_at_the_first_failed_item() -> None:
    with pytest.raises(NodeExecutionError, match=r"item 2 failed .*negative -2"):
        run(each(concurrency=2), {"items": [1, 2, -2, 4, 5, 6]})


def test_a_map_that_collects_reports_every_item() -> None:
    result = run(each(on_item_error="collect"), {"items": [1, -1, 3]})
    assert result[0] == {"ok": True, "result": 2} and result[2] == {"ok": True, "result": 6}
    assert result[1]["ok"] is False and "negative -1" in result[1]["error"]


@pytest.mark.parametrize(
    ("items", "message"),
    [("$input.name", "yields str, not a list"), ("$input.missing.deeper", "missing")],
)
def test_a_map_whose_items_are_not_a_list_fails_through_its_error_handler(
    items: str, message: str
) -> None:
    flow = parent({"id": "each", "type": "map", "items": items, "flow_id": "double"})
    with pytest.raises(NodeExecutionError, match=message):
        run(flow, {"name": "ada"})
    forgiving = parent(
        {
            "id": "each",
            "type": "map",
            "items": items,
            "flow_id": "double",
            "errorHandler": {"strategy": "continue"},
        }
    )
    assert run(forgiving, {"name": "ada"}) is None


def test_generator_mode_yields_the_map_node_once_with_its_list() -> None:
    outputs = run(each(), {"items": [1, 2]}, mode="generator")
    assert [o["node_id"] for o in outputs] == ["each", "done"]
    assert outputs[0]["result"] == [2, 4] and outputs[0]["node_type"] == "map"


@pytest.mark.parametrize(
    ("node", "error", "message"),
    [
        (
            {"id": "m", "type": "map", "items": "$input.x", "flow_id": "double", "concurrency": 0},
            InvalidChildNodeError,
            "concurrency must be 1 to 1000, got 0",
        ),
        (
            {"id": "m", "type": "map", "items": " ", "flow_id": "double"},
            InvalidChildNodeError,
            "items must be an expression",
        ),
        (
            {"id": "s", "type": "subflow", "flow_id": "bad id!"},
            InvalidChildNodeError,
            "flow_id 'bad id!'",
        ),
        (
            {
                "id": "m",
                "type": "map",
                "items": "$input.x",
                "flow_id": "double",
                "on_item_error": "shrug",
            },
            InvalidFlowDocumentError,
            "on_item_error",
        ),
        (
            {"id": "s", "type": "subflow", "flow_id": "kyc", "on_parent_end": "sometimes"},
            InvalidFlowDocumentError,
            "on_parent_end",
        ),
    ],
)
def test_a_child_node_that_cannot_start_children_is_refused_at_registration(
    node: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        parent(node)
