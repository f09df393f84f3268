"""Model equivalence of the three execution strategies (E6, E8).

One generated flow, one input, one script of handler outcomes, three drivers:

- Normal: ``FlowExecution.arun()``;
- Generator: ``async for out in FlowExecution.aiter_nodes()``;
- Distributed: ``arun_distributed`` one node per call, from ``flow.start_node`` following
  ``next_node_id``, with the context checkpointed between every step
  (``to_json`` → ``json.dumps`` → ``json.loads`` → ``from_json``) and a NEW ``FlowExecution``
  built on the restored context each time; a node that asks for a durable retry
  (``NodeRetryRequested``, E15) is run again from the same checkpoint after its delay, with
  the attempt number a worker's counters would give it — as a worker's delayed carrier does.

They must visit the same nodes in the same order with the same results and branches, call the
handlers for the same (node, attempt) pairs, back off on the same fake-clock schedule, end with
the same context, and finish with the same result or the same error. The error comparison
follows E8: Normal and Generator let ``FlowExecutionException`` subclasses through and wrap
anything else as ``FlowErrorException`` (original as ``__cause__``); Distributed raises exactly
``FlowErrorException`` with the original as ``__cause__``.

Flows are DAGs of ``task``, ``if``, ``switch`` and ``end`` nodes (targets only point at later
nodes, ``end`` nodes come last), so every walk terminates. Handler outcomes are scripted per
(node id, attempt): return a JSON value, echo the rendered params, raise a transient error
(``TransientNodeError`` / ``RuntimeError``), raise a deterministic one (``ValueError`` /
``DeterministicNodeError``) or hang until the node's timeout (1-3 ms of real time, at most two
hanging nodes per flow). Backoffs run on ``FakeClock.sleep``, so they never sleep for real.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.engine.expressions import compile_flow_expressions
from plaita.application.engine.runner import BACKOFF_SLICE_SECONDS
from plaita.application.engine.strategies import StepOutput
from plaita.application.handlers import HandlerRegistry
from plaita.domain.execution import Suspension
from plaita.domain.failures import (
    DeterministicNodeError,
    ExecutionDeadlineError,
    FlowErrorException,
    FlowExecutionException,
    NodeExecutionError,
    NodeRetryRequested,
    TransientNodeError,
)
from plaita.domain.flow import Flow

from .conftest import FakeClock, SequentialIds, handler_registry

JSON = Any
#: ("return", value) | ("echo", None) | ("raise", error class name) | ("hang", None)
Outcome = tuple[str, Any]

ERRORS: dict[str, Callable[[str], Exception]] = {
    "TransientNodeError": TransientNodeError,
    "RuntimeError": RuntimeError,
    "ValueError": ValueError,
    "DeterministicNodeError": DeterministicNodeError,
}
MAX_HANGING_NODES = 2
EXECUTION_ID = "x-1"


# --- scenario and scripted handlers ----------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A flow document, its input and the outcome of every (node, attempt)."""

    document: dict[str, JSON]
    input: dict[str, JSON]
    script: dict[str, list[Outcome]]

    def flow(self) -> Flow:
        flow = Flow.from_document(self.document)
        compile_flow_expressions(flow)  # as registration would: every expression parses
        return flow


class Script:
    """Two handlers (sync and async) that play the scenario's script for the node calling them."""

    def __init__(self, outcomes: dict[str, list[Outcome]]) -> None:
        self._outcomes = outcomes
        self.calls: list[tuple[str, int]] = []

    def _play(self, params: JSON, ctx: Any) -> Outcome:
        self.calls.append((ctx.node_id, ctx.attempt))
        kind, value = self._outcomes[ctx.node_id][ctx.attempt - 1]
        if kind == "raise":
            raise ERRORS[value](f"{value} at {ctx.node_id}#{ctx.attempt}")
        if kind == "echo":
            return kind, params
        return kind, copy.deepcopy(value)

    async def run_async(self, params: JSON, ctx: Any) -> JSON:
        kind, value = self._play(params, ctx)
        if kind == "hang":
            await asyncio.Event().wait()  # until the node's timeout cancels us
        return value

    def run_sync(self, params: JSON, ctx: Any) -> JSON:
        kind, value = self._play(params, ctx)
        assert kind != "hang", "sync handlers are only generated for nodes that never hang"
        return value

    def registry(self) -> HandlerRegistry:
        return handler_registry(run_async=self.run_async, run_sync=self.run_sync)


class Recorder:
    """A listener that writes down the lifecycle calls of one execution (E9)."""

    def __init__(self) -> None:
        self.nodes: list[tuple[Any, ...]] = []
        self.flow_starts = 0
        self.flow_ends: list[tuple[JSON, BaseException | None]] = []

    def on_flow_start(self, execution_id: str, flow_id: str) -> None:
        self.flow_starts += 1

    def on_node_start(self, execution_id: str, node_id: str, node_type: str) -> None:
        self.nodes.append(("start", node_id, node_type))

    def on_node_end(
        self, execution_id: str, node_id: str, result: JSON, branch: str | None
    ) -> None:
        self.nodes.append(("end", node_id, typed(result), branch))

    def on_flow_end(self, execution_id: str, result: JSON, error: BaseException | None) -> None:
        self.flow_ends.append((typed(result), error))

    @property
    def visited(self) -> list[str]:
        return [entry[1] for entry in self.nodes if entry[0] == "start"]


class NoWaits:
    """The registrar of flows without event/sleep nodes: never called."""

    async def register_event_wait(self, node: Any, context: ExecutionContext) -> Suspension:
        raise AssertionError(f"unexpected event wait at {node.id!r}")

    async def register_timer(self, node: Any, context: ExecutionContext) -> Suspension:
        raise AssertionError(f"unexpected timer at {node.id!r}")


def typed(value: JSON) -> JSON:
    """``value`` with every scalar tagged by its type: 1, 1.0 and True must not compare equal."""
    if isinstance(value, dict):
        return ("dict", tuple((key, typed(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(typed(item) for item in value))
    return (type(value).__name__, value)


# --- the three drivers -----------------------------------------------------------------------


@dataclass
class Run:
    recorder: Recorder
    script: Script
    clock: FakeClock
    context: JSON = None
    result: JSON = None
    error: BaseException | None = None
    outputs: list[StepOutput] = field(default_factory=list)


def fresh_context(scenario: Scenario) -> ExecutionContext:
    return ExecutionContext(
        execution_id=EXECUTION_ID, flow_id=scenario.document["flow_id"], input=scenario.input
    )


def new_execution(
    flow: Flow,
    context: ExecutionContext,
    run: Run,
    mode: Literal["normal", "generator", "distributed"] = "normal",
) -> FlowExecution:
    return FlowExecution(
        flow,
        context,
        handlers=run.script.registry(),
        clock=run.clock,
        new_id=SequentialIds().new_id,
        options=RunOptions(mode=mode),
        callbacks=CallbackManager([run.recorder]),
        sleep=run.clock.sleep,
    )


def new_run(scenario: Scenario) -> Run:
    return Run(Recorder(), Script(scenario.script), FakeClock())


async def run_normal(scenario: Scenario) -> Run:
    run = new_run(scenario)
    execution = new_execution(scenario.flow(), fresh_context(scenario), run)
    try:
        run.result = await execution.arun()
    except Exception as exc:
        run.error = exc
    run.context = typed(execution.context.to_json())
    return run


async def run_generator(scenario: Scenario) -> Run:
    run = new_run(scenario)
    execution = new_execution(scenario.flow(), fresh_context(scenario), run, "generator")
    try:
        async for output in execution.aiter_nodes():
            run.outputs.append(output)
    except Exception as exc:
        run.error = exc
    else:
        run.result = run.outputs[-1].result
    run.context = typed(execution.context.to_json())
    return run


def checkpoint(context: ExecutionContext) -> ExecutionContext:
    """What a worker stores between steps, and what the next step starts from."""
    return ExecutionContext.from_json(json.loads(json.dumps(context.to_json())))


async def run_distributed(scenario: Scenario) -> Run:
    run = new_run(scenario)
    flow = scenario.flow()
    context = fresh_context(scenario)
    node_id = flow.start_node.id
    attempts: dict[str, int] = {}
    nodes = scenario.document["nodes"]
    for _ in range(len(nodes) * (2 + max(n.get("retryTimes", 5) for n in nodes))):
        context = checkpoint(context)
        context.attempts = dict(attempts)  # what the worker's counters say (E15)
        execution = new_execution(flow, context, run, "distributed")
        try:
            output = await execution.arun_distributed(
                node_id=node_id, resume=None, registrar=NoWaits()
            )
        except Exception as exc:
            retry = exc.__cause__
            if isinstance(retry, NodeRetryRequested):
                # The worker's delayed carrier, on the runner's backoff slices.
                attempts[node_id] = retry.attempt + 1
                delay = retry.delay_ms / 1000
                while delay > 0:
                    await run.clock.sleep(min(BACKOFF_SLICE_SECONDS, delay))
                    delay -= BACKOFF_SLICE_SECONDS
                continue
            run.error = exc
            break
        attempts.pop(node_id, None)
        run.outputs.append(output)
        assert not output.is_suspend
        if output.is_end:
            run.result = output.result
            break
        assert output.next_node_id is not None
        node_id = output.next_node_id
    else:
        raise AssertionError("the distributed walk of a DAG did not reach an end node")
    run.context = typed(checkpoint(context).to_json())
    return run


async def run_three_ways(scenario: Scenario) -> tuple[Run, Run, Run]:
    return (
        await run_normal(scenario),
        await run_generator(scenario),
        await run_distributed(scenario),
    )


# --- the equivalence -------------------------------------------------------------------------


def original_error(error: BaseException) -> BaseException:
    """The error under an E8 wrapper: FlowErrorException(-500) with the original as cause."""
    if type(error) is FlowErrorException and error.__cause__ is not None:
        return error.__cause__
    return error


def assert_same_error(normal: BaseException, distributed: BaseException) -> None:
    assert type(distributed) is FlowErrorException, "E8: distributed flattens every error"
    cause = distributed.__cause__
    assert cause is not None, "E8: the distributed error keeps the original as __cause__"
    assert isinstance(normal, FlowExecutionException), "E8: Normal raises the flow error family"
    if isinstance(cause, FlowExecutionException):
        assert type(normal) is type(cause), "E8: Normal lets FlowExecutionException through"
    else:
        assert type(normal) is FlowErrorException, "E8: Normal wraps other errors"
        assert type(normal.__cause__) is type(cause)
    original = original_error(normal)
    assert str(original) == str(cause)
    assert getattr(original, "node_id", None) == getattr(cause, "node_id", None)


def assert_equivalent(normal: Run, generator: Run, distributed: Run) -> None:
    runs = {"normal": normal, "generator": generator, "distributed": distributed}
    for name, run in runs.items():
        assert run.recorder.flow_starts == 1, f"{name}: on_flow_start fires once"
        assert len(run.recorder.flow_ends) == 1, f"{name}: on_flow_end fires once"
    # The same nodes in the same order, with the same results and branches.
    assert generator.recorder.visited == normal.recorder.visited
    assert distributed.recorder.visited == normal.recorder.visited
    assert generator.recorder.nodes == normal.recorder.nodes
    assert distributed.recorder.nodes == normal.recorder.nodes
    # The same handler attempts, backoff schedule and final context (checkpoints are lossless).
    assert generator.script.calls == normal.script.calls
    assert distributed.script.calls == normal.script.calls
    assert generator.clock.sleeps == normal.clock.sleeps
    assert distributed.clock.sleeps == normal.clock.sleeps
    assert generator.context == normal.context
    assert distributed.context == normal.context
    # One output per node, identical in Generator and Distributed mode (E6).
    assert [typed(o.to_json()) for o in distributed.outputs] == [
        typed(o.to_json()) for o in generator.outputs
    ]
    assert [o.node_id for o in generator.outputs] == [
        entry[1] for entry in normal.recorder.nodes if entry[0] == "end"
    ]
    # The same ending.
    if normal.error is None:
        assert generator.error is None, f"generator failed alone: {generator.error!r}"
        assert distributed.error is None, f"distributed failed alone: {distributed.error!r}"
        assert typed(generator.result) == typed(normal.result)
        assert typed(distributed.result) == typed(normal.result)
        for run in runs.values():
            assert run.recorder.flow_ends == [(typed(normal.result), None)]
    else:
        assert generator.error is not None, f"generator succeeded alone: {generator.result!r}"
        assert distributed.error is not None, f"distributed succeeded alone: {distributed.result!r}"
        assert type(generator.error) is type(normal.error)
        assert str(generator.error) == str(normal.error)
        assert_same_error(normal.error, distributed.error)
        assert_same_error(generator.error, distributed.error)
        for run in runs.values():
            ((result, error),) = run.recorder.flow_ends
            assert result == typed(None) and error is not None


def describe(run: Run) -> None:
    """What the example exercised (``pytest --hypothesis-show-statistics``)."""
    error = run.error
    event(f"ending: {'result' if error is None else type(original_error(error)).__name__}")
    event(f"nodes visited: {len(run.recorder.visited)}")
    event(f"handler attempts: {len(run.script.calls)}, retried: {bool(run.clock.sleeps)}")


def check_equivalence(scenario: Scenario) -> tuple[Run, Run, Run]:
    runs = asyncio.run(run_three_ways(scenario))
    assert_equivalent(*runs)
    return runs


# --- generation ------------------------------------------------------------------------------

json_values = st.one_of(
    st.integers(0, 4),
    st.none(),
    st.booleans(),
    st.sampled_from(["a", "b"]),
    st.fixed_dictionaries({"k": st.integers(0, 3)}),
    st.lists(st.integers(0, 3), max_size=2),
)


@st.composite
def failure_strategies(draw: st.DrawFn) -> dict[str, JSON] | None:
    name = draw(st.sampled_from(["abort", "omitted", "continue", "continue_with", "continue_with"]))
    if name == "omitted":
        return None  # the default: abort
    if name == "continue_with":
        return {"strategy": name, "default": draw(json_values)}
    return {"strategy": name}


def conditions(refs: list[str]) -> st.SearchStrategy[str]:
    """Conditions over the input and node results; about one in four may fail to evaluate."""

    def over(ref: str, k: int) -> st.SearchStrategy[str]:
        safe = st.sampled_from(
            [
                f"amount > {k}",
                f"amount == {k}",
                "flag",
                "not flag",
                f"NODE.get('{ref}') == {k}",
                f"'{ref}' in NODE",
                f"$LAST_NODE == {k}",
                "BRANCH == 'then'",
                f"LAST_NODE_ID == '{ref}'",
                f"len(NODE) > {k}",
            ]
        )
        risky = st.sampled_from(
            [
                f"NODE['{ref}'] == {k}",  # KeyError when ref did not run
                f"$NODE['{ref}'] is None",
                f"NODE['{ref}']['k'] > 1",  # TypeError unless ref returned a dict
                "missing_name > 1",  # an unknown name
            ]
        )
        return st.one_of(safe, safe, safe, risky)

    return st.tuples(st.sampled_from(refs), st.integers(0, 4)).flatmap(lambda rk: over(*rk))


def end_outputs(refs: list[str]) -> st.SearchStrategy[str | None]:
    return st.sampled_from(refs).flatmap(
        lambda ref: st.sampled_from(
            [
                None,
                "$LAST_NODE",
                f"$NODE['{ref}']",
                "amount * 2",
                "BRANCH",
                "LAST_NODE_ID",
                "len(NODE)",
                f"{{'v': NODE.get('{ref}'), 'n': amount}}",
                "{amount, 1}",  # a set: evaluates, but is not JSON
                "EXECUTION_ID",
            ]
        )
    )


def task_params(refs: list[str]) -> st.SearchStrategy[dict[str, JSON]]:
    return st.sampled_from(refs).flatmap(
        lambda ref: st.sampled_from(
            [
                {},
                {"amount": "${amount}", "fixed": [1, "x"]},
                {"prev": f"${{NODE['{ref}']}}"},
                {"last": "${$LAST_NODE}", "label": "n=${amount}"},
            ]
        )
    )


def outcomes(can_hang: bool) -> st.SearchStrategy[Outcome]:
    succeed = st.tuples(st.just("return"), json_values)
    choices = [
        succeed,
        succeed,
        succeed,
        st.tuples(st.just("echo"), st.none()),
        st.tuples(st.just("raise"), st.sampled_from(["TransientNodeError", "RuntimeError"])),
        st.tuples(st.just("raise"), st.sampled_from(["ValueError", "DeterministicNodeError"])),
    ]
    if can_hang:
        choices.append(st.tuples(st.just("hang"), st.none()))
    return st.one_of(choices)


def _with_handlers(node: dict[str, JSON], draw: st.DrawFn) -> dict[str, JSON]:
    for key in ("errorHandler", "timeoutHandler"):
        strategy = draw(failure_strategies())
        if strategy is not None:
            node[key] = strategy
    return node


NO_FLOW_TIMEOUT: st.SearchStrategy[JSON] = st.none()


@st.composite
def scenarios(
    draw: st.DrawFn, flow_timeouts: st.SearchStrategy[JSON] = NO_FLOW_TIMEOUT
) -> Scenario:
    inner = [f"n{i}" for i in range(draw(st.integers(1, 7)))]
    ends = [f"e{j}" for j in range(draw(st.integers(1, 2)))]
    order = inner + ends
    nodes: list[dict[str, JSON]] = []
    script: dict[str, list[Outcome]] = {}
    hangs_left = MAX_HANGING_NODES
    for i, node_id in enumerate(inner):
        # Mostly the next node, so walks are long; sometimes any later one (a DAG either way).
        following = st.just(order[i + 1])
        later = st.one_of(following, following, st.sampled_from(order[i + 1 :]))
        refs = inner[:i] or inner  # look back at nodes that may have run (n0: at itself)
        kind = "task" if i == 0 else draw(st.sampled_from(["task", "task", "if", "switch"]))
        if kind == "task":
            timeout = draw(st.none() | st.integers(1, 3))
            # Real timeouts only on async handlers: a sync one runs on a thread and could be
            # late by a few ms on a busy machine, which would make the script nondeterministic.
            handler = (
                "t:run_async"
                if timeout is not None
                else draw(st.sampled_from(["t:run_async", "t:run_sync"]))
            )
            retries = draw(st.integers(0, 2))
            can_hang = timeout is not None and hangs_left > 0
            plan = draw(st.lists(outcomes(can_hang), min_size=retries + 1, max_size=retries + 1))
            if any(outcome_kind == "hang" for outcome_kind, _ in plan):
                hangs_left -= 1
            script[node_id] = plan
            node: dict[str, JSON] = {
                "id": node_id,
                "type": "task",
                "handler": handler,
                "params": draw(task_params(refs)),
                "next": draw(later),
                "retryTimes": retries,
            }
            if timeout is not None:
                node["timeout"] = timeout
        elif kind == "if":
            node = {
                "id": node_id,
                "type": "if",
                "condition": draw(conditions(refs)),
                "then": draw(later),
                "else": draw(later),
            }
        else:
            cases = draw(
                st.lists(
                    st.fixed_dictionaries({"when": conditions(refs), "next": later}),
                    min_size=1,
                    max_size=3,
                )
            )
            node = {"id": node_id, "type": "switch", "cases": cases}
            default = draw(st.none() | later)
            if default is not None:
                node["default"] = default
        nodes.append(_with_handlers(node, draw))
    for end_id in ends:
        node = {"id": end_id, "type": "end"}
        output = draw(end_outputs(inner))
        if output is not None:
            node["output"] = output
        nodes.append(_with_handlers(node, draw))
    document: dict[str, JSON] = {"flow_id": "eq", "start": "n0", "nodes": nodes}
    flow_timeout = draw(flow_timeouts)
    if flow_timeout is not None:
        document["timeout"] = flow_timeout
    flow_input = {"amount": draw(st.integers(0, 6)), "flag": draw(st.booleans())}
    return Scenario(document=document, input=flow_input, script=script)


# --- the properties --------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY_SETTINGS
@given(scenarios())
def test_normal_generator_and_distributed_modes_walk_and_end_alike(scenario: Scenario) -> None:
    """E6/E8: for any valid task/if/switch/end flow and any scripted outcomes (values,
    transient and deterministic failures, node timeouts, retries, errorHandler and
    timeoutHandler strategies), the three strategies visit the same nodes and end alike —
    Distributed one node per call with a JSON checkpoint between every step."""
    describe(check_equivalence(scenario)[0])


def two_retried_tasks_under_a_flow_timeout() -> Scenario:
    """Each task fails once and is retried after 1 s; the flow's budget is 1.5 s in all."""
    retried_once: list[Outcome] = [("raise", "TransientNodeError"), ("return", 1)]
    task = {"type": "task", "handler": "t:run_async", "retryTimes": 1}
    return Scenario(
        document={
            "flow_id": "eq",
            "start": "n0",
            "timeout": 1500,
            "nodes": [
                {"id": "n0", **task, "next": "n1"},
                {"id": "n1", **task, "next": "e0"},
                {"id": "e0", "type": "end", "output": "$LAST_NODE"},
            ],
        },
        input={"amount": 1, "flag": True},
        script={"n0": retried_once, "n1": retried_once},
    )


@settings(PROPERTY_SETTINGS, max_examples=60)
@given(scenarios(flow_timeouts=st.sampled_from([None, 500, 1000, 1500, 2500, "PT2S"])))
def test_normal_and_generator_agree_under_a_flow_deadline(scenario: Scenario) -> None:
    """E5/E6: with a flow `timeout` the two in-process modes share one budget and agree;
    Distributed is left out on purpose (see the next test)."""
    normal, generator, _ = asyncio.run(run_three_ways(scenario))
    assert type(normal.error) is type(generator.error)
    assert normal.result == generator.result


def test_distributed_mode_gives_each_step_a_fresh_budget() -> None:
    """E5 (no budget accumulates across steps): the engine does not persist elapsed time, so in
    Distributed mode the flow timeout bounds each step — an execution may be suspended for
    days between steps. Normal and Generator spend one budget across the whole run."""
    normal, generator, distributed = asyncio.run(
        run_three_ways(two_retried_tasks_under_a_flow_timeout())
    )
    assert isinstance(normal.error, ExecutionDeadlineError)
    assert isinstance(generator.error, ExecutionDeadlineError)
    assert distributed.error is None and distributed.result == 1


def single_task(
    task: dict[str, JSON], script: list[Outcome], after: dict[str, JSON] | None = None
) -> Scenario:
    """Task ``n0`` followed by ``after`` (a branching node over e_yes/e_no) or an end node."""
    nodes: list[dict[str, JSON]] = [{"id": "n0", "type": "task", **task, "next": "b"}]
    if after is None:
        nodes.append({"id": "b", "type": "end", "output": "$LAST_NODE"})
    else:
        nodes += [
            {"id": "b", **after},
            {"id": "e_yes", "type": "end", "output": "'yes'"},
            {"id": "e_no", "type": "end", "output": "'no'"},
        ]
    return Scenario(
        document={"flow_id": "eq", "start": "n0", "nodes": nodes},
        input={"amount": 1, "flag": True},
        script={"n0": script},
    )


def test_a_transient_failure_retried_to_success_agrees_in_every_mode() -> None:
    """E3: two transient failures, then a value; 1 s + 2 s of backoff on the fake clock."""
    normal, _, distributed = check_equivalence(
        single_task(
            {"handler": "t:run_async", "retryTimes": 2},
            [("raise", "TransientNodeError"), ("raise", "RuntimeError"), ("return", 7)],
        )
    )
    assert normal.result == distributed.result == 7


def test_a_deterministic_failure_with_continue_with_agrees_in_every_mode() -> None:
    """E3: a ValueError is not retried; continue_with records the default."""
    normal, _, distributed = check_equivalence(
        single_task(
            {
                "handler": "t:run_sync",
                "retryTimes": 2,
                "errorHandler": {"strategy": "continue_with", "default": {"fallback": True}},
            },
            [("raise", "ValueError")],
        )
    )
    assert normal.result == distributed.result == {"fallback": True}


def test_a_timeout_with_timeout_handler_continue_agrees_in_every_mode() -> None:
    """E3/E4: a hanging attempt times out; timeoutHandler continue records null."""
    normal, _, distributed = check_equivalence(
        single_task(
            {"handler": "t:run_async", "timeout": 2, "timeoutHandler": {"strategy": "continue"}},
            [("hang", None)],
        )
    )
    assert normal.result is None and distributed.result is None


def test_an_aborting_node_has_the_e8_error_shape_in_every_mode() -> None:
    """E8: Normal raises NodeExecutionError, Distributed FlowErrorException caused by it."""
    normal, generator, distributed = check_equivalence(
        single_task({"handler": "t:run_sync"}, [("raise", "DeterministicNodeError")])
    )
    assert isinstance(normal.error, NodeExecutionError)
    assert isinstance(generator.error, NodeExecutionError)
    assert type(distributed.error) is FlowErrorException
    assert isinstance(distributed.error.__cause__, NodeExecutionError)


def test_a_tuple_result_survives_the_checkpoint_unchanged() -> None:
    """E2/E6: what a node records must be what the next step sees after a checkpoint."""
    scenario = single_task(
        {"handler": "t:run_async"},
        [("return", (1, 2))],
        {"type": "if", "condition": "NODE['n0'] == [1, 2]", "then": "e_yes", "else": "e_no"},
    )
    check_equivalence(scenario)
