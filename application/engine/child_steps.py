"""A worker's step of a ``subflow`` or ``map`` node (E13, E14), for the Distributed strategy.

The first step starts the children (a map: the first ``concurrency`` of them) and suspends
the parent on them, with its own check armed (``ChildExecutions.watch``). Each later step is
a resume: a ``child`` carrier names the child that ended, a ``timeout`` is the parent's check
and looks at every child still running. The step reads the children's own states, counts each
end once (``plaita.domain.children``), starts the next items, and either suspends again —
the counters in the new suspension, written by the same fenced checkpoint — or finishes the
node: the subflow's result, the map's list in item order, or the failure through the
node's errorHandler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.children import (
    ChildExecutions,
    ChildStart,
    map_items,
    map_start,
    subflow_start,
)
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.expressions import ExpressionEvaluationError
from plaita.application.engine.runner import fail_through_handler
from plaita.application.engine.strategies import ResumeInput, StepOutput, suspended_output
from plaita.domain.child_outcomes import (
    ChildOutcome,
    map_failure,
    map_result,
    subflow_result,
)
from plaita.domain.children import (
    MapProgress,
    begin_map,
    child_ended,
    child_execution_id,
)
from plaita.domain.envelope import ResumeType
from plaita.domain.errors import PayloadLimitError
from plaita.domain.execution import Suspension
from plaita.domain.failures import ChildExecutionError, InvalidMapError
from plaita.domain.flow import ChildNode, MapNode, OnParentEnd, SubflowNode

JSON = Any
#: A finished map reads its children's outcomes back this many at a time.
GATHER_PAGE = 500
#: A child's end notice makes its parent look at this many other running children too.
LOOK_AROUND = 64


class ChildSteps:
    def __init__(self, children: ChildExecutions, callbacks: CallbackManager) -> None:
        self._children = children
        self._callbacks = callbacks

    async def begin(self, node: ChildNode, context: ExecutionContext) -> StepOutput:
        """The node's first step: start its children and wait for them."""
        self._callbacks.on_node_start(context.execution_id, node.id, node.type)
        try:
            if isinstance(node, SubflowNode):
                start = subflow_start(node, context)
                await self._children.start(context, node, [start])
                return await self._wait(node, context, None, child_id=start.child_id)
            items = map_items(node, context)
            step = begin_map(
                len(items), concurrency=node.concurrency, on_item_error=node.on_item_error
            )
            await self._children.start(
                context, node, [map_start(node, context, items, i) for i in step.start]
            )
        except (ExpressionEvaluationError, InvalidMapError, PayloadLimitError) as exc:
            return self._finish(node, context, fail_through_handler(node, exc))
        if step.progress.finished:  # an empty list
            return self._finish(node, context, [])
        return await self._wait(node, context, None, progress=step.progress)

    async def resume(
        self, node: ChildNode, context: ExecutionContext, resume: ResumeInput
    ) -> StepOutput:
        """A child ended (``child``) or the parent's check came due (``timeout``)."""
        waiting = resume.waiting
        if waiting is None or not waiting.waits_for_children:
            raise ChildExecutionError(
                f"{node.type} node {node.id!r} was resumed without the wait it suspended on"
            )
        rearm = resume.resume_type is ResumeType.TIMEOUT
        if isinstance(node, SubflowNode):
            assert waiting.child_id is not None
            (outcome,) = await self._children.outcomes([waiting.child_id])
            if outcome is None:
                return await self._wait(
                    node, context, waiting, child_id=waiting.child_id, rearm=rearm
                )
            try:
                result = subflow_result(node.id, outcome)
            except ChildExecutionError as exc:
                result = fail_through_handler(node, exc)
            return self._finish(node, context, result)
        assert isinstance(node, MapNode) and waiting.map is not None
        return await self._map_resume(node, context, waiting, resume, rearm)

    async def _map_resume(
        self,
        node: MapNode,
        context: ExecutionContext,
        waiting: Suspension,
        resume: ResumeInput,
        rearm: bool,
    ) -> StepOutput:
        progress = waiting.map
        assert progress is not None
        running = progress.running_indexes()
        if not rearm:
            # The named child, and the oldest others running: children end by the dozen, and
            # one look counts every end it finds (their own notices then change nothing).
            named = [i for i in _named_index(resume) if i in running]
            running = named + [i for i in running[:LOOK_AROUND] if i not in named]
        indexes = running
        ids = [child_execution_id(context.execution_id, node.id, i) for i in indexes]
        outcomes = await self._children.outcomes(ids)
        starts: list[ChildStart] = []
        failure: ChildOutcome | None = None
        cancel = False
        items: list[JSON] | None = None
        for index, outcome in zip(indexes, outcomes, strict=True):
            if outcome is None:
                continue
            step = child_ended(progress, index=index, ok=outcome.ok)
            progress = step.progress
            if step.cancel_running:
                failure, cancel = outcome, True
            if step.start:
                items = items if items is not None else map_items(node, context)
                starts += [map_start(node, context, items, i) for i in step.start]
        if starts:
            await self._children.start(context, node, starts)
        if cancel:
            running = progress.running_indexes()
            await self._children.cancel(
                [child_execution_id(context.execution_id, node.id, i) for i in running]
            )
        if not progress.finished:
            return await self._wait(node, context, waiting, progress=progress, rearm=rearm)
        if progress.aborted:
            assert failure is not None
            return self._finish(
                node,
                context,
                fail_through_handler(node, map_failure(node.id, progress, failure)),
            )
        return self._finish(
            node,
            context,
            map_result(node.on_item_error, await self._gather(node, context, progress)),
        )

    async def _gather(
        self, node: MapNode, context: ExecutionContext, progress: MapProgress
    ) -> list[ChildOutcome]:
        gathered: list[ChildOutcome] = []
        for first in range(0, progress.total, GATHER_PAGE):
            page = range(first, min(first + GATHER_PAGE, progress.total))
            ids = [child_execution_id(context.execution_id, node.id, i) for i in page]
            for child_id, outcome in zip(ids, await self._children.outcomes(ids), strict=True):
                if outcome is None:  # counted as ended, so it did: it was re-run since
                    raise ChildExecutionError(
                        f"map node {node.id!r}: child {child_id} ended and runs again; it "
                        "cannot be gathered"
                    )
                gathered.append(outcome)
        return gathered

    async def _wait(
        self,
        node: ChildNode,
        context: ExecutionContext,
        waiting: Suspension | None,
        *,
        child_id: str | None = None,
        progress: MapProgress | None = None,
        rearm: bool = False,
    ) -> StepOutput:
        if waiting is None or rearm:
            timer_id, due = await self._children.watch(context)
        else:
            timer_id, due = waiting.subscription_id or "", waiting.wake_at_ms or 0
        suspension = Suspension(
            node.id,
            timer_id,
            due,
            child_id=child_id,
            map=progress,
            abandon_children=node.on_parent_end is OnParentEnd.ABANDON,
        )
        waits_for = child_id or f"{progress.running if progress else 0} children"
        return suspended_output(
            node, context, self._callbacks, suspension, f"waiting for {waits_for}"
        )

    def _finish(self, node: ChildNode, context: ExecutionContext, result: JSON) -> StepOutput:
        context.record_node(node.id, result, None)
        self._callbacks.on_node_end(context.execution_id, node.id, result, None)
        return StepOutput(node.id, node.type, result, None, node.next, is_end=False)


def _named_index(resume: ResumeInput) -> Sequence[int]:
    """The item a ``child`` carrier names; none when it names no valid one."""
    told = resume.event or {}
    index = told.get("index") if isinstance(told, dict) else None
    return [index] if isinstance(index, int) and not isinstance(index, bool) else []
