"""NodeRunner, strategies and the FlowExecution facade: one test per rule (E1-E10)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions, effective_budget_ms
from plaita.application.engine.strategies import ResumeInput
from plaita.application.handlers import HandlerRegistry
from plaita.domain.envelope import ResumeType
from plaita.domain.errors import ResumeProtocolError
from plaita.domain.execution import Suspension
from plaita.domain.failures import (
    BranchMissError,
    DeterministicNodeError,
    ExecutionCancelledError,
    ExecutionDeadlineError,
    FlowErrorException,
    NodeExecutionError,
    NodeTimeoutError,
    TransientNodeError,
)
from plaita.domain.flow import Flow

from .conftest import FakeClock, SequentialIds, handler_registry

TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="default")


def task_flow(node: dict[str, Any], *, timeout: Any = None) -> Flow:
    document: dict[str, Any] = {
        "flow_id": "f",
        "start": "work",
        "nodes": [
            {"id": "work", "type": "task", "handler": "t:work", "next": "done", **node},
            {"id": "done", "type": "end"},
        ],
    }
    if timeout is not None:
        document["timeout"] = timeout
    return Flow.from_document(document)


def execution(
    flow: Flow,
    handlers: HandlerRegistry,
    clock: FakeClock,
    *,
    input: dict[str, Any] | None = None,
    options: RunOptions | None = None,
) -> FlowExecution:
    return FlowExecution(
        flow,
        ExecutionContext(execution_id="x-1", flow_id=flow.flow_id, input=input or {}),
        handlers=handlers,
        clock=clock,
        new_id=SequentialIds().new_id,
        options=options,
        sleep=clock.sleep,
    )


class Flaky:
    def __init__(self, failures: list[BaseException], result: Any = "ok") -> None:
        self.failures = list(failures)
        self.result = result
        self.calls = 0

    def __call__(self, params: Any, ctx: Any) -> Any:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.result


async def test_success_records_last_node_branch_and_node_result(clock: FakeClock) -> None:
    run = execution(task_flow({}), handler_registry(work=lambda p, c: {"v": 1}), clock)
    assert await run.arun() == {"v": 1}
    assert run.context.node_results["work"] == {"v": 1}
    assert run.context.last_node_id == "done"


async def test_transient_error_is_retried_with_exponential_backoff(clock: FakeClock) -> None:
    """E3: 1 + retryTimes attempts, backoff 1 s then 2 s (sliced by 0.5 s)."""
    flaky = Flaky([TransientNodeError("busy"), RuntimeError("blip")])
    run = execution(task_flow({"retryTimes": 2}), handler_registry(work=flaky), clock)
    assert await run.arun() == "ok"
    assert flaky.calls == 3
    assert sum(clock.sleeps) == pytest.approx(3.0)
    assert max(clock.sleeps) <= 0.5


async def test_deterministic_error_skips_retries_and_goes_to_error_handler(
    clock: FakeClock,
) -> None:
    flaky = Flaky([ValueError("bad amount")])
    run = execution(task_flow({"retryTimes": 5}), handler_registry(work=flaky), clock)
    with pytest.raises(NodeExecutionError, match="bad amount"):
        await run.arun()
    assert flaky.calls == 1
    assert clock.sleeps == []


async def test_deterministic_node_error_code_1001_is_not_retried(clock: FakeClock) -> None:
    flaky = Flaky([DeterministicNodeError("config")])
    run = execution(task_flow({"retryTimes": 3}), handler_registry(work=flaky), clock)
    with pytest.raises(NodeExecutionError):
        await run.arun()
    assert flaky.calls == 1


async def test_exhausted_retries_use_error_handler_continue(clock: FakeClock) -> None:
    flaky = Flaky([RuntimeError("a"), RuntimeError("b")])
    flow = task_flow({"retryTimes": 1, "errorHandler": {"strategy": "continue"}})
    run = execution(flow, handler_registry(work=flaky), clock)
    assert await run.arun() is None
    assert flaky.calls == 2


async def test_error_handler_continue_with_returns_the_default(clock: FakeClock) -> None:
    flow = task_flow({"errorHandler": {"strategy": "continue_with", "default": {"fallback": 1}}})
    run = execution(flow, handler_registry(work=Flaky([ValueError("x")])), clock)
    assert await run.arun() == {"fallback": 1}


async def test_node_timeout_goes_to_timeout_handler(clock: FakeClock) -> None:
    async def slow(params: Any, ctx: Any) -> None:
        await asyncio.Event().wait()

    flow = task_flow(
        {"timeout": 10, "timeoutHandler": {"strategy": "continue_with", "default": "late"}}
    )
    assert await execution(flow, handler_registry(work=slow), clock).arun() == "late"


async def test_node_timeout_abort_raises_node_timeout_error(clock: FakeClock) -> None:
    release = threading.Event()
    seen_cancel: list[bool] = []

    def slow(params: Any, ctx: Any) -> None:
        release.wait(2)
        seen_cancel.append(ctx.cancelled)

    run = execution(task_flow({"timeout": 10, "retryTimes": 3}), handler_registry(work=slow), clock)
    with pytest.raises(NodeTimeoutError):
        await run.arun()
    release.set()
    for _ in range(200):  # the abandoned thread finishes on its own; bounded wait
        if seen_cancel:
            break
        await asyncio.sleep(0.01)
    assert seen_cancel == [True], "the abandoned attempt sees its cancel signal (E4)"


async def test_execution_deadline_bypasses_timeout_handler_and_is_not_retried(
    clock: FakeClock,
) -> None:
    """E5: the budget runs out during a backoff; the next attempt raises the deadline error."""

    def burn(params: Any, ctx: Any) -> None:
        clock.advance(0.9)
        raise RuntimeError("slow dependency")

    flow = task_flow({"retryTimes": 5, "timeoutHandler": {"strategy": "continue"}}, timeout=1000)
    with pytest.raises(ExecutionDeadlineError):
        await execution(flow, handler_registry(work=burn), clock).arun()


def test_budget_takes_the_stricter_of_flow_and_caller_and_defaults_to_deadline() -> None:
    flow = task_flow({}, timeout="PT10S")
    assert effective_budget_ms(flow, RunOptions(timeout_ms=4000)) == 4000
    assert effective_budget_ms(flow, RunOptions(timeout_ms=60_000)) == 10_000
    assert effective_budget_ms(task_flow({}), RunOptions(default_deadline_ms=7)) == 7


async def test_cancel_is_observed_before_the_next_attempt(clock: FakeClock) -> None:
    run_holder: list[FlowExecution] = []

    def cancel_then_fail(params: Any, ctx: Any) -> None:
        run_holder[0].cancel()
        raise RuntimeError("transient")

    run = execution(task_flow({"retryTimes": 3}), handler_registry(work=cancel_then_fail), clock)
    run_holder.append(run)
    with pytest.raises(ExecutionCancelledError):
        await run.arun()


@pytest.mark.parametrize("timeout", [None, 5000])
async def test_contextvar_of_the_caller_is_visible_in_a_sync_handler(
    clock: FakeClock, timeout: int | None
) -> None:
    """E4 / #58: both sync paths run in a copy of the caller's context."""
    TENANT.set("acme")
    node = {} if timeout is None else {"timeout": timeout}
    run = execution(task_flow(node), handler_registry(work=lambda p, c: TENANT.get()), clock)
    assert await run.arun() == "acme"


async def test_contextvar_of_the_caller_is_visible_in_an_async_handler(clock: FakeClock) -> None:
    TENANT.set("acme")

    async def read(params: Any, ctx: Any) -> str:
        return TENANT.get()

    assert await execution(task_flow({}), handler_registry(work=read), clock).arun() == "acme"


async def test_params_are_templated_from_input_and_node_results(clock: FakeClock) -> None:
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "a",
            "nodes": [
                {
                    "id": "a",
                    "type": "task",
                    "handler": "t:echo",
                    "params": {"n": "${amount * 2}"},
                    "next": "b",
                },
                {
                    "id": "b",
                    "type": "task",
                    "handler": "t:echo",
                    "params": {"prev": "${$NODE['a']['n']}", "label": "got ${amount}"},
                    "next": "e",
                },
                {"id": "e", "type": "end", "output": "$LAST_NODE"},
            ],
        }
    )
    run = execution(flow, handler_registry(echo=lambda p, c: p), clock, input={"amount": 21})
    assert await run.arun() == {"prev": 42, "label": "got 21"}


async def test_switch_without_match_or_default_fails_naming_the_node(clock: FakeClock) -> None:
    """E7: a branch miss never leaves the execution running."""
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "s",
            "nodes": [
                {"id": "s", "type": "switch", "cases": [{"when": "x == 1", "next": "e"}]},
                {"id": "e", "type": "end"},
            ],
        }
    )
    with pytest.raises(BranchMissError, match="'s'"):
        await execution(flow, handler_registry(), clock, input={"x": 2}).arun()


async def test_condition_that_fails_to_evaluate_goes_to_the_error_handler(clock: FakeClock) -> None:
    """E3: a type error in a condition is the node's failure, handled by its errorHandler."""
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "n",
            "nodes": [
                {"id": "n", "type": "if", "condition": "x > 1", "then": "e", "else": "e"},
                {"id": "e", "type": "end"},
            ],
        }
    )
    run = execution(flow, handler_registry(), clock, input={"x": "text"})
    with pytest.raises(NodeExecutionError):
        await run.arun()


class Registrar:
    def __init__(self) -> None:
        self.waits: list[str] = []

    async def register_event_wait(self, node: Any, context: ExecutionContext) -> Suspension:
        self.waits.append(node.id)
        return Suspension(node_id=node.id, subscription_id=f"sub-{node.id}")

    async def register_timer(self, node: Any, context: ExecutionContext) -> Suspension:
        return Suspension(node_id=node.id, wake_at_ms=1)


WAIT_FLOW = Flow.from_document(
    {
        "flow_id": "w",
        "start": "wait",
        "nodes": [
            {
                "id": "wait",
                "type": "event",
                "event_type": "go",
                "next": "e",
                "timeout_next": "late",
            },
            {"id": "late", "type": "end", "output": "'late'"},
            {"id": "e", "type": "end", "output": "$NODE['wait']['data']['v']"},
        ],
    }
)


async def test_distributed_event_node_suspends_only_after_registering(clock: FakeClock) -> None:
    registrar = Registrar()
    run = execution(WAIT_FLOW, handler_registry(), clock)
    out = await run.arun_distributed(node_id="wait", resume=None, registrar=registrar)
    assert out.is_suspend and out.suspension == Suspension("wait", "sub-wait")
    assert registrar.waits == ["wait"]


async def test_distributed_event_resume_records_the_event_and_moves_on(clock: FakeClock) -> None:
    run = execution(WAIT_FLOW, handler_registry(), clock)
    resume = ResumeInput(ResumeType.EVENT, {"data": {"v": 7}}, "sub-wait")
    out = await run.arun_distributed(node_id="wait", resume=resume, registrar=Registrar())
    assert (out.result, out.next_node_id) == ({"data": {"v": 7}}, "e")
    end = await run.arun_distributed(node_id="e", resume=None, registrar=Registrar())
    assert end.is_end and end.result == 7


async def test_distributed_timeout_resume_takes_timeout_next(clock: FakeClock) -> None:
    run = execution(WAIT_FLOW, handler_registry(), clock)
    resume = ResumeInput(ResumeType.TIMEOUT)
    out = await run.arun_distributed(node_id="wait", resume=resume, registrar=Registrar())
    assert out.next_node_id == "late" and out.result == {"timeout": True}


async def test_distributed_mode_flattens_every_error_with_the_cause(clock: FakeClock) -> None:
    """E8: distributed callers see one error shape; the original is __cause__."""
    run = execution(task_flow({}), handler_registry(work=Flaky([ValueError("no")])), clock)
    with pytest.raises(FlowErrorException) as caught:
        await run.arun_distributed(node_id="work", resume=None, registrar=Registrar())
    assert type(caught.value) is FlowErrorException
    assert isinstance(caught.value.__cause__, NodeExecutionError)
    assert caught.value.node_id == "work"


async def test_event_resume_on_a_task_node_is_a_protocol_error(clock: FakeClock) -> None:
    run = execution(task_flow({}), handler_registry(work=lambda p, c: 1), clock)
    with pytest.raises(FlowErrorException) as caught:
        await run.arun_distributed(
            node_id="work", resume=ResumeInput(ResumeType.EVENT, {}), registrar=Registrar()
        )
    assert isinstance(caught.value.__cause__, ResumeProtocolError)


async def test_callbacks_see_the_node_lifecycle(clock: FakeClock) -> None:
    seen: list[tuple[str, str]] = []

    class Listener:
        def on_node_start(self, execution_id: str, node_id: str, node_type: str) -> None:
            seen.append(("start", node_id))

        def on_node_end(self, execution_id: str, node_id: str, result: Any, branch: Any) -> None:
            seen.append(("end", node_id))

        def on_flow_end(self, execution_id: str, result: Any, error: Any) -> None:
            seen.append(("flow_end", str(result)))

    run = execution(task_flow({}), handler_registry(work=lambda p, c: 5), clock)
    run.callback_manager.add(Listener())
    await run.arun()
    assert seen == [
        ("start", "work"),
        ("end", "work"),
        ("start", "done"),
        ("end", "done"),
        ("flow_end", "5"),
    ]


async def test_a_failing_listener_never_fails_the_execution(clock: FakeClock) -> None:
    class Broken:
        def on_node_start(self, *args: Any) -> None:
            raise RuntimeError("listener bug")

    run = execution(task_flow({}), handler_registry(work=lambda p, c: 5), clock)
    run.callback_manager.add(Broken())
    assert await run.arun() == 5


async def test_handlers_set_variables_that_later_expressions_read(clock: FakeClock) -> None:
    """E2: ctx.set_variable writes an execution variable on success."""

    def remember(params: Any, ctx: Any) -> int:
        ctx.set_variable("limit", 100)
        return 1

    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "work",
            "nodes": [
                {"id": "work", "type": "task", "handler": "t:work", "next": "done"},
                {"id": "done", "type": "end", "output": "[limit, vars['limit']]"},
            ],
        }
    )
    run = execution(flow, handler_registry(work=remember), clock)
    assert await run.arun() == [100, 100]
    assert run.context.variables == {"limit": 100}


async def test_a_failed_attempt_leaves_no_variables_behind(clock: FakeClock) -> None:
    def half_done(params: Any, ctx: Any) -> None:
        ctx.set_variable("partial", True)
        raise ValueError("gave up")

    flow = task_flow({"errorHandler": {"strategy": "continue"}})
    run = execution(flow, handler_registry(work=half_done), clock)
    assert await run.arun() is None
    assert run.context.variables == {}


async def test_a_variable_that_is_not_json_fails_the_attempt(clock: FakeClock) -> None:
    def bad(params: Any, ctx: Any) -> None:
        ctx.set_variable("when", object())

    run = execution(task_flow({}), handler_registry(work=bad), clock)
    with pytest.raises(NodeExecutionError, match="not JSON-serialisable"):
        await run.arun()


async def test_a_misspelt_handler_fails_at_once_without_retries(clock: FakeClock) -> None:
    """E3: an unknown handler is deterministic; retrying cannot make the function appear."""
    flow = Flow.from_document(
        {
            "flow_id": "f",
            "start": "work",
            "nodes": [
                {
                    "id": "work",
                    "type": "task",
                    "handler": "t:no_such",
                    "retryTimes": 3,
                    "next": "done",
                },
                {"id": "done", "type": "end"},
            ],
        }
    )
    with pytest.raises(NodeExecutionError, match="no_such"):
        await execution(flow, handler_registry(), clock).arun()
    assert clock.sleeps == []


def test_expressions_offer_no_random_functions() -> None:
    """A condition must decide the same way when a step is replayed from its checkpoint."""
    from plaita.application.engine.expressions import ExpressionEvaluationError, evaluate

    with pytest.raises(ExpressionEvaluationError):
        evaluate("rand()", {})


def test_an_empty_expression_is_refused_by_name() -> None:
    """Found by the console's schemathesis run: it used to escape as simpleeval's error."""
    from plaita.application.engine.expressions import compile_expression
    from plaita.domain.errors import InvalidExpressionError

    with pytest.raises(InvalidExpressionError, match="is not an expression"):
        compile_expression("")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("result", "limit"),
    [
        pytest.param(nested(10_000), "node result depth limit", id="ten-thousand-deep"),
        pytest.param(nested(65), "node result depth limit", id="one-level-too-deep"),
        pytest.param({"blob": "x" * (1024 * 1024)}, "node result size limit", id="too-large"),
    ],
)
async def test_a_result_over_the_limit_fails_the_node_deterministically_naming_it(
    clock: FakeClock, result: Any, limit: str
) -> None:
    """E3, R4: a 10,000-deep result raised RecursionError, which counted as transient
    and was retried; now the node fails at once, by name, without burning its retries."""
    handler = Flaky([], result=result)
    run = execution(task_flow({"retryTimes": 3}), handler_registry(work=handler), clock)

    with pytest.raises(NodeExecutionError, match=limit) as failed:
        await run.arun()

    assert handler.calls == 1
    assert "ResultLimitError" in str(failed.value)
    assert "node 'work' result" in str(failed.value)


async def test_a_result_at_the_limit_is_kept(clock: FakeClock) -> None:
    run = execution(task_flow({}), handler_registry(work=Flaky([], result=nested(64))), clock)
    await run.arun()
    assert run.context.node_results["work"] == nested(64)


async def test_a_variable_over_the_limit_fails_the_attempt_naming_it(clock: FakeClock) -> None:
    def deep(params: Any, ctx: Any) -> None:
        ctx.set_variable("tree", nested(10_000))

    run = execution(task_flow({"retryTimes": 3}), handler_registry(work=deep), clock)
    with pytest.raises(NodeExecutionError, match="execution variable depth limit"):
        await run.arun()


@pytest.mark.parametrize("key", ["items", "keys", "values", "get", "copy"])
def test_a_key_named_like_a_mapping_method_is_the_key(key: str) -> None:
    """``$input.items`` reads the input's ``items``: data before the mapping's methods."""
    from plaita.application.engine.expressions import ExpressionEvaluationError, evaluate

    names = {"input": {key: [1, 2]}, "nested": {"a": {key: "x"}}}
    assert evaluate(f"$input.{key}", names) == [1, 2]
    assert evaluate(f"$nested.a.{key}", names) == "x"
    with pytest.raises(ExpressionEvaluationError):
        evaluate("$input.__class__", names)
