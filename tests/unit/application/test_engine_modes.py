"""Generator and Normal-mode waits, cancellation in backoff, callbacks across steps (E2-E9)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.adapters.memory.event_bus import MemoryEventBus
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.engine.strategies import ResumeInput
from plaita.application.handlers import HandlerRegistry
from plaita.domain.envelope import ResumeType
from plaita.domain.errors import UnboundedWaitError
from plaita.domain.events import Event
from plaita.domain.execution import Suspension
from plaita.domain.failures import (
    ExecutionCancelledError,
    ExecutionDeadlineError,
    FlowErrorException,
    NodeExecutionError,
    NodeTimeoutError,
)
from plaita.domain.flow import Flow

from .conftest import FakeClock, SequentialIds, handler_registry

CHAIN = Flow.from_document(
    {
        "flow_id": "chain",
        "start": "a",
        "nodes": [
            {
                "id": "a",
                "type": "task",
                "handler": "t:double",
                "params": {"n": "${n}"},
                "next": "b",
            },
            {
                "id": "b",
                "type": "if",
                "condition": "$LAST_NODE > 10",
                "then": "big",
                "else": "small",
            },
            {"id": "big", "type": "end", "output": "'big'"},
            {"id": "small", "type": "end", "output": "'small'"},
        ],
    }
)

WAIT = Flow.from_document(
    {
        "flow_id": "wait",
        "start": "w",
        "nodes": [
            {
                "id": "w",
                "type": "event",
                "event_type": "go",
                "filter": {"ok": True},
                "timeout": 50,
                "timeout_next": "late",
                "next": "done",
            },
            {"id": "late", "type": "end", "output": "'late'"},
            {"id": "done", "type": "end", "output": "$NODE['w']['data']['v']"},
        ],
    }
)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_flow_start(self, execution_id: str, flow_id: str) -> None:
        self.calls.append(("flow_start",))

    def on_node_end(self, execution_id: str, node_id: str, result: Any, branch: Any) -> None:
        self.calls.append(("node_end", node_id))

    def on_flow_end(self, execution_id: str, result: Any, error: Any) -> None:
        self.calls.append(("flow_end", result, type(error).__name__ if error else None))


def make(
    flow: Flow,
    clock: FakeClock,
    handlers: HandlerRegistry | None = None,
    *,
    input: dict[str, Any] | None = None,
    waiter: MemoryEventBus | None = None,
    context: ExecutionContext | None = None,
) -> tuple[FlowExecution, Recorder]:
    recorder = Recorder()
    execution = FlowExecution(
        flow,
        context or ExecutionContext(execution_id="x-1", flow_id=flow.flow_id, input=input or {}),
        handlers=handlers or handler_registry(double=lambda p, c: p["n"] * 2),
        clock=clock,
        new_id=SequentialIds().new_id,
        event_waiter=waiter,
        sleep=clock.sleep,
    )
    execution.callback_manager.add(recorder)
    return execution, recorder


async def test_generator_yields_one_output_per_node(clock: FakeClock) -> None:
    execution, recorder = make(CHAIN, clock, input={"n": 7})
    outputs = [o async for o in execution.aiter_nodes()]
    assert [(o.node_id, o.node_type, o.result, o.branch, o.is_end) for o in outputs] == [
        ("a", "task", 14, None, False),
        ("b", "if", True, "then", False),
        ("big", "end", "big", None, True),
    ]
    assert recorder.calls[-1] == ("flow_end", "big", None)


async def test_generator_closed_early_fires_flow_end_without_result_or_error(
    clock: FakeClock,
) -> None:
    """E6: on_flow_end fires when the iterator is closed early, with no result."""
    execution, recorder = make(CHAIN, clock, input={"n": 7})
    outputs = execution.aiter_nodes()
    first = await anext(outputs)
    await outputs.aclose()
    assert first.node_id == "a"
    assert recorder.calls[-1] == ("flow_end", None, None)


async def test_generator_failure_passes_flow_exceptions_and_reports_them(
    clock: FakeClock,
) -> None:
    def broken(params: Any, ctx: Any) -> Any:
        raise ValueError("no")

    execution, recorder = make(CHAIN, clock, handler_registry(double=broken), input={"n": 1})
    with pytest.raises(NodeExecutionError):
        _ = [o async for o in execution.aiter_nodes()]
    assert recorder.calls[-1] == ("flow_end", None, "NodeExecutionError")


async def test_generator_wraps_other_errors_as_flow_error_minus_500(clock: FakeClock) -> None:
    """E8: an error that is not a FlowExecutionException becomes FlowErrorException(-500)."""
    flow_without_timeout = Flow.from_document(
        {
            **WAIT.to_document(),
            "nodes": [
                {"id": "w", "type": "event", "event_type": "go", "next": "done"},
                {"id": "done", "type": "end"},
            ],
        }
    )
    execution, recorder = make(flow_without_timeout, clock, waiter=MemoryEventBus(closed=True))
    with pytest.raises(FlowErrorException) as caught:
        _ = [o async for o in execution.aiter_nodes()]
    assert caught.value.code == -500 and isinstance(caught.value.__cause__, UnboundedWaitError)
    assert recorder.calls[-1] == ("flow_end", None, "FlowErrorException")


def test_sync_iterator_runs_on_its_own_loop_and_closing_it_ends_the_flow(
    clock: FakeClock,
) -> None:
    execution, recorder = make(CHAIN, clock, input={"n": 1})
    nodes = execution.iter_nodes()
    assert next(nodes).node_id == "a"
    nodes.close()
    assert recorder.calls[-1] == ("flow_end", None, None)
    fresh, _ = make(CHAIN, clock, input={"n": 1})
    assert [o.node_id for o in fresh.iter_nodes()] == ["a", "b", "small"]


def test_sync_run_returns_the_end_result(clock: FakeClock) -> None:
    execution, _ = make(CHAIN, clock, input={"n": 6})
    assert execution.run() == "big"


async def test_normal_event_node_waits_in_process_for_a_matching_event(
    clock: FakeClock,
) -> None:
    bus = MemoryEventBus()
    execution, _ = make(WAIT, clock, waiter=bus)
    running = asyncio.create_task(execution.arun())
    await asyncio.sleep(0)
    await bus.publish(Event("e-0", "go", 1, {"ok": False, "v": 0}, correlation_id="x-1"))
    await bus.publish(Event("e-1", "go", 1, {"ok": True, "v": 42}, correlation_id="x-1"))
    assert await asyncio.wait_for(running, 5) == 42


async def test_normal_event_published_before_the_wait_is_not_lost(clock: FakeClock) -> None:
    """V6: the event waits in the correlation's inbox."""
    bus = MemoryEventBus()
    await bus.publish(Event("e-1", "go", 1, {"ok": True, "v": 7}, correlation_id="x-1"))
    execution, _ = make(WAIT, clock, waiter=bus)
    assert await execution.arun() == 7


async def test_normal_event_node_timeout_takes_timeout_next(clock: FakeClock) -> None:
    execution, recorder = make(WAIT, clock, waiter=MemoryEventBus())
    assert await execution.arun() == "late"
    assert ("node_end", "w") in recorder.calls


async def test_event_timeout_without_timeout_next_fails_the_node(clock: FakeClock) -> None:
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "w",
            "nodes": [
                {"id": "w", "type": "event", "event_type": "go", "timeout": 5, "next": "e"},
                {"id": "e", "type": "end"},
            ],
        }
    )
    execution, _ = make(flow, clock, waiter=MemoryEventBus())
    with pytest.raises(NodeTimeoutError, match="'w'"):
        await execution.arun()


async def test_normal_sleep_node_sleeps_its_duration(clock: FakeClock) -> None:
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "nap",
            "nodes": [
                {"id": "nap", "type": "sleep", "duration": "PT2S", "next": "e"},
                {"id": "e", "type": "end", "output": "'rested'"},
            ],
        }
    )
    execution, _ = make(flow, clock)
    assert await execution.arun() == "rested"
    assert clock.sleeps == [2.0]


async def test_cancel_during_backoff_takes_effect_within_one_second(clock: FakeClock) -> None:
    """E3: the 1 s backoff is sliced by 0.5 s; a cancel in the first slice stops the node
    before its second attempt."""
    attempts: list[int] = []
    execution_box: list[FlowExecution] = []

    def flaky(params: Any, ctx: Any) -> Any:
        attempts.append(ctx.attempt)
        raise RuntimeError("transient")

    async def sleep_then_cancel(seconds: float) -> None:
        await clock.sleep(seconds)
        if len(clock.sleeps) == 1:
            execution_box[0].cancel()

    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "t",
            "nodes": [
                {"id": "t", "type": "task", "handler": "t:flaky", "retryTimes": 3, "next": "e"},
                {"id": "e", "type": "end"},
            ],
        }
    )
    execution = FlowExecution(
        flow,
        ExecutionContext(execution_id="x-1", flow_id="f"),
        handlers=handler_registry(flaky=flaky),
        clock=clock,
        new_id=SequentialIds().new_id,
        sleep=sleep_then_cancel,
    )
    execution_box.append(execution)
    with pytest.raises(ExecutionCancelledError):
        await execution.arun()
    assert attempts == [1]
    assert sum(clock.sleeps) <= 1.0


class Registrar:
    async def register_event_wait(self, node: Any, context: Any) -> Suspension:
        return Suspension(node.id, subscription_id="s-1")

    async def register_timer(self, node: Any, context: Any) -> Suspension:
        return Suspension(node.id, wake_at_ms=99)


async def test_distributed_callbacks_are_kept_across_steps(clock: FakeClock) -> None:
    """E9: listeners of one facade see every step; flow start and end fire once."""
    execution, recorder = make(CHAIN, clock, input={"n": 1})
    node = "a"
    while True:
        out = await execution.arun_distributed(node_id=node, resume=None, registrar=Registrar())
        if out.is_end:
            break
        assert out.next_node_id is not None
        node = out.next_node_id
    assert recorder.calls == [
        ("flow_start",),
        ("node_end", "a"),
        ("node_end", "b"),
        ("node_end", "small"),
        ("flow_end", "small", None),
    ]


async def test_distributed_sleep_registers_a_timer_and_resumes_on_timeout(
    clock: FakeClock,
) -> None:
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "nap",
            "nodes": [
                {"id": "nap", "type": "sleep", "duration": 10, "next": "e"},
                {"id": "e", "type": "end", "output": "'up'"},
            ],
        }
    )
    execution, _ = make(flow, clock)
    suspended = await execution.arun_distributed(node_id="nap", resume=None, registrar=Registrar())
    assert suspended.suspension == Suspension("nap", wake_at_ms=99)
    woken = await execution.arun_distributed(
        node_id="nap", resume=ResumeInput(ResumeType.TIMEOUT), registrar=Registrar()
    )
    assert woken.next_node_id == "e"


def test_sync_run_distributed_advances_one_node(clock: FakeClock) -> None:
    execution, _ = make(CHAIN, clock, input={"n": 1})
    out = execution.run_distributed(node_id="a", resume=None, registrar=Registrar())
    assert (out.node_id, out.result, out.next_node_id) == ("a", 2, "b")


async def test_arun_refuses_a_distributed_run(clock: FakeClock) -> None:
    execution = FlowExecution(
        CHAIN,
        ExecutionContext(execution_id="x", flow_id="chain"),
        handlers=handler_registry(),
        clock=clock,
        new_id=SequentialIds().new_id,
        options=RunOptions(mode="distributed"),
    )
    with pytest.raises(ValueError, match="arun_distributed"):
        await execution.arun()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    input=st.dictionaries(st.text(max_size=5), json_values, max_size=4),
    variables=st.dictionaries(st.text(max_size=5), json_values, max_size=4),
    results=st.dictionaries(st.text(min_size=1, max_size=5), json_values, max_size=4),
    branch=st.none() | st.sampled_from(["then", "else", "case:0", "default"]),
)
def test_context_survives_a_json_round_trip_losslessly(
    input: dict[str, Any], variables: dict[str, Any], results: dict[str, Any], branch: str | None
) -> None:
    """E2: a checkpoint restores the context exactly."""
    context = ExecutionContext(
        execution_id="x-1",
        flow_id="f",
        input=input,
        variables=variables,
        node_results=results,
        last_node_id=next(iter(results), None),
        last_branch=branch,
        tenant_id="acme",
    )
    restored = ExecutionContext.from_json(json.loads(json.dumps(context.to_json())))
    assert restored.to_json() == context.to_json()
    assert restored.names() == context.names()


async def test_normal_sleep_longer_than_the_budget_ends_at_the_deadline(clock: FakeClock) -> None:
    """E5: in-process, a sleep is bounded by the execution's budget too."""
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "nap",
            "timeout": 1000,
            "nodes": [
                {"id": "nap", "type": "sleep", "duration": "PT5S", "next": "e"},
                {"id": "e", "type": "end"},
            ],
        }
    )
    execution, _ = make(flow, clock)
    with pytest.raises(ExecutionDeadlineError, match="'nap'"):
        await execution.arun()
    assert clock.sleeps == [1.0]


async def test_normal_wait_longer_than_the_budget_ends_at_the_deadline(clock: FakeClock) -> None:
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "w",
            "timeout": 20,
            "nodes": [
                {
                    "id": "w",
                    "type": "event",
                    "event_type": "go",
                    "timeout": "PT1H",
                    "timeout_next": "e",
                    "next": "e",
                },
                {"id": "e", "type": "end"},
            ],
        }
    )
    execution, _ = make(flow, clock, waiter=MemoryEventBus())
    with pytest.raises(ExecutionDeadlineError):
        await execution.arun()


async def test_event_timeout_without_timeout_next_uses_the_timeout_handler(
    clock: FakeClock,
) -> None:
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "w",
            "nodes": [
                {
                    "id": "w",
                    "type": "event",
                    "event_type": "go",
                    "timeout": 5,
                    "next": "e",
                    "timeoutHandler": {"strategy": "continue_with", "default": {"late": True}},
                },
                {"id": "e", "type": "end", "output": "$NODE['w']"},
            ],
        }
    )
    execution, _ = make(flow, clock, waiter=MemoryEventBus())
    assert await execution.arun() == {"late": True}
