"""Child executions in the engine (E13, E14): what ``subflow`` and ``map`` nodes need of the
world in each mode, and the node logic the modes share.

- **Distributed** (a worker): ``ChildExecutions`` starts children as executions of their own
  (ids derived from the parent, ``plaita.domain.children``), reads how they ended, cancels
  them, and arms the parent's own check on them. The parent suspends until a child's end
  wakes it (a ``child`` carrier) or its check comes due (a ``timeout``).
- **Normal and Generator** (``plaita run``, ``FlowExecution.run``): ``ChildRuns`` runs a
  child to its end in this process and tells how it ended; a map runs up to ``concurrency``
  of them at once.

Both read a child's end the same way (``plaita.domain.child_outcomes``), so a node gets the
same result, or the same failure through its errorHandler, in every mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.expressions import (
    ExpressionEvaluationError,
    evaluate,
    render_template,
)
from plaita.application.engine.runner import fail_through_handler
from plaita.domain.child_outcomes import ChildOutcome, map_failure, map_result, subflow_result
from plaita.domain.children import begin_map, child_ended, child_execution_id
from plaita.domain.errors import PayloadLimitError, PlaitaError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.failures import (
    ChildExecutionError,
    ExecutionCancelledError,
    FlowExecutionException,
    InvalidMapError,
)
from plaita.domain.flow import ChildNode, Flow, MapNode, SubflowNode
from plaita.domain.limits import INPUT_LIMIT, check_json_value

JSON = Any


@attrs.frozen
class ChildStart:
    """One child to start: its derived id, its input, and its item (a map's) or None."""

    child_id: str
    input: dict[str, JSON]
    index: int | None = None


class ChildExecutions(Protocol):
    """A worker's child executions (Distributed mode)."""

    async def start(
        self, parent: ExecutionContext, node: ChildNode, children: Sequence[ChildStart]
    ) -> None:
        """Start these children of ``parent``'s ``node``; one already started is left as is."""
        ...

    async def outcomes(self, child_ids: Sequence[str]) -> list[ChildOutcome | None]:
        """How each child ended, in order; None for one still running."""
        ...

    async def cancel(self, child_ids: Sequence[str]) -> None:
        """Cancel these children; one that has ended is left as is."""
        ...

    async def watch(self, parent: ExecutionContext) -> tuple[str, int]:
        """Arm the parent's own check on its children: its timer id and due time (ms)."""
        ...

    async def notify_parent(self, child: ExecutionState) -> None:
        """Tell ended ``child``'s parent again that it ended (a crash lost the first word)."""
        ...


class ChildRuns(Protocol):
    """Children run to their end in this process (Normal and Generator modes)."""

    async def run(
        self, parent: ExecutionContext, node: ChildNode, start: ChildStart
    ) -> ChildOutcome:
        """Run one child of ``parent``'s ``node`` to its end."""
        ...


def _unavailable(node: ChildNode) -> ChildExecutionError:
    return ChildExecutionError(
        f"{node.type} node {node.id!r} starts executions of {node.flow_id!r} but this run "
        "cannot start child executions; run the flow on a worker, or with plaita run "
        "(give the child flows with --with-flow)"
    )


class NoChildExecutions:
    """ChildExecutions of a run given none: a subflow or map node fails with a named error."""

    async def start(
        self, parent: ExecutionContext, node: ChildNode, children: Sequence[ChildStart]
    ) -> None:
        raise _unavailable(node)

    async def outcomes(self, child_ids: Sequence[str]) -> list[ChildOutcome | None]:
        return [None for _ in child_ids]

    async def cancel(self, child_ids: Sequence[str]) -> None:
        return None

    async def watch(self, parent: ExecutionContext) -> tuple[str, int]:
        raise ChildExecutionError("this run cannot wait for child executions")

    async def notify_parent(self, child: ExecutionState) -> None:
        return None


class NoChildRuns:
    """ChildRuns of a run given none: a subflow or map node fails with a named error."""

    async def run(
        self, parent: ExecutionContext, node: ChildNode, start: ChildStart
    ) -> ChildOutcome:
        raise _unavailable(node)


NO_CHILD_EXECUTIONS = NoChildExecutions()
NO_CHILD_RUNS = NoChildRuns()


def subflow_start(node: SubflowNode, context: ExecutionContext) -> ChildStart:
    """The subflow's child: its input rendered from the parent's context."""
    rendered = render_template(node.input, context.names())
    if not isinstance(rendered, dict):
        raise ExpressionEvaluationError(f"subflow node {node.id!r}: input must be an object")
    check_json_value(rendered, INPUT_LIMIT, field=f"subflow node {node.id!r} input")
    return ChildStart(child_execution_id(context.execution_id, node.id), rendered)


def map_items(node: MapNode, context: ExecutionContext) -> list[JSON]:
    """The list ``items`` yields; ``InvalidMapError`` when it is not a list. While the
    parent waits on the map its context does not change, so every call yields the same."""
    value = evaluate(node.items, context.names())
    if not isinstance(value, list):
        raise InvalidMapError(
            f"map node {node.id!r}: items {node.items!r} yields {type(value).__name__}, not a list"
        )
    return value


def map_start(
    node: MapNode, context: ExecutionContext, items: Sequence[JSON], index: int
) -> ChildStart:
    """Item ``index``'s child: input ``{"item": ..., "index": ...}``."""
    child_input = {"item": items[index], "index": index}
    check_json_value(child_input, INPUT_LIMIT, field=f"map node {node.id!r} item {index}")
    return ChildStart(child_execution_id(context.execution_id, node.id, index), child_input, index)


FlowResolver = Callable[[str, str | None], Awaitable[Flow]]
#: Runs one child flow to its end in this process: (flow, the child's context) → its result.
RunChild = Callable[[Flow, ExecutionContext], Awaitable[JSON]]


class InProcessChildren:
    """``ChildRuns`` in this process: the child flow from ``flows``, run by ``run_child``
    with the parent's tenant; its failure is an outcome, never an exception to the parent."""

    def __init__(self, flows: FlowResolver, run_child: RunChild) -> None:
        self._flows = flows
        self._run_child = run_child

    async def run(
        self, parent: ExecutionContext, node: ChildNode, start: ChildStart
    ) -> ChildOutcome:
        try:
            flow = await self._flows(node.flow_id, node.version)
        except PlaitaError as exc:
            raise ChildExecutionError(f"{node.type} node {node.id!r}: {exc}") from None
        context = ExecutionContext(
            execution_id=start.child_id,
            flow_id=flow.flow_id,
            input=start.input,
            tenant_id=parent.tenant_id,
        )
        try:
            result = await self._run_child(flow, context)
        except ExecutionCancelledError as exc:
            return ChildOutcome(start.child_id, ExecutionStatus.CANCELLED, error=str(exc))
        except FlowExecutionException as exc:
            return ChildOutcome(start.child_id, ExecutionStatus.ERROR, error=str(exc))
        return ChildOutcome(start.child_id, ExecutionStatus.COMPLETED, result=result)


class InProcessChildSteps:
    """A subflow or map node in Normal and Generator modes: its children run here, a map's
    ``concurrency`` at a time, and the node's result is what a worker's would be."""

    def __init__(self, runs: ChildRuns, callbacks: CallbackManager) -> None:
        self._runs = runs
        self._callbacks = callbacks

    async def run(self, node: ChildNode, context: ExecutionContext) -> JSON:
        self._callbacks.on_node_start(context.execution_id, node.id, node.type)
        try:
            if isinstance(node, SubflowNode):
                outcome = await self._runs.run(context, node, subflow_start(node, context))
                result = subflow_result(node.id, outcome)
            else:
                result = await self._map(node, context)
        except (ExpressionEvaluationError, InvalidMapError, PayloadLimitError) as exc:
            result = fail_through_handler(node, exc)
        except ChildExecutionError as exc:
            result = fail_through_handler(node, exc)
        context.record_node(node.id, result, None)
        self._callbacks.on_node_end(context.execution_id, node.id, result, None)
        return result

    async def _map(self, node: MapNode, context: ExecutionContext) -> JSON:
        """The domain's map rules, as a worker follows them: the first ``concurrency``
        children start, each end is counted and starts the next, ``fail`` cancels the rest."""
        items = map_items(node, context)
        step = begin_map(len(items), concurrency=node.concurrency, on_item_error=node.on_item_error)
        progress = step.progress
        outcomes: dict[int, ChildOutcome] = {}
        running: dict[asyncio.Task[ChildOutcome], int] = {}
        failure: ChildOutcome | None = None

        def launch(indexes: range) -> None:
            for index in indexes:
                start = map_start(node, context, items, index)
                running[asyncio.ensure_future(self._runs.run(context, node, start))] = index

        launch(step.start)
        try:
            while running and failure is None:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=running.__getitem__):
                    index = running.pop(task)
                    outcomes[index] = task.result()
                    step = child_ended(progress, index=index, ok=outcomes[index].ok)
                    progress = step.progress
                    if step.cancel_running:
                        failure = outcomes[index]
                    launch(step.start)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        if failure is not None:
            raise map_failure(node.id, progress, failure)
        return map_result(node.on_item_error, [outcomes[i] for i in range(len(items))])
