"""Execution strategies (E6): Normal (and Generator) run to the end in process; the
Distributed strategy (``distributed.py``) advances one node per call.

All walk the same graph with the same NodeRunner; they differ only in how they treat waits
(``event`` and ``sleep`` nodes) and in how errors are shaped for their callers (E8). What
they share lives here: the step output, the subscription an event node waits with, the
durations of waits, and how a wait ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.children import NO_CHILD_RUNS, ChildRuns, InProcessChildSteps
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.rate_limits import key_failure, rate_key, rate_limit_of
from plaita.application.engine.runner import Budget, NodeRunner
from plaita.application.null_objects import NO_RATE_BUCKETS
from plaita.application.ports import EventWaiter, RateBuckets
from plaita.application.tenancy import tenant_scope
from plaita.domain.durations import MAX_WAIT_MS, parse_duration_ms
from plaita.domain.envelope import ResumeType
from plaita.domain.errors import RateLimitKeyError
from plaita.domain.events import EventSubscription
from plaita.domain.execution import Suspension
from plaita.domain.failures import (
    ExecutionDeadlineError,
    NodeTimeoutError,
)
from plaita.domain.flow import (
    BaseNode,
    EventNode,
    Flow,
    HttpNode,
    MapNode,
    ParallelNode,
    SleepNode,
    SubflowNode,
    TaskNode,
)
from plaita.domain.step import CANCELLED_MARKER
from plaita.domain.tokens import WaitFor

JSON = Any
Sleep = Callable[[float], Awaitable[None]]

#: The result an ``event`` node records when its timeout fires and ``timeout_next`` is taken.
TIMEOUT_MARKER: dict[str, JSON] = {"timeout": True}


@attrs.frozen
class ResumeInput:
    resume_type: ResumeType
    event: JSON = None
    subscription_id: str | None = None
    #: The suspension being resumed: a wait for children reads its progress from it.
    waiting: Suspension | None = None


@attrs.frozen
class StepOutput:
    """What one step did: the node it ran, its result and where the execution stands now."""

    node_id: str
    node_type: str
    result: JSON
    branch: str | None
    next_node_id: str | None
    is_end: bool = False
    suspension: Suspension | None = None

    @property
    def is_suspend(self) -> bool:
        return self.suspension is not None

    def to_json(self) -> dict[str, JSON]:
        """One line of ``plaita run --stream``: id, type, result, branch, is_end (E6)."""
        return {
            "node_id": self.node_id,
            "node_type": self.node_type,
            "result": self.result,
            "branch": self.branch,
            "next_node_id": self.next_node_id,
            "is_end": self.is_end,
            "is_suspend": self.is_suspend,
        }


def event_subscription(
    node: EventNode, context: ExecutionContext, subscription_id: str, now_ms: int
) -> EventSubscription:
    """An event node waits for its type, correlated by the execution id (E1a)."""
    return EventSubscription(
        subscription_id=subscription_id,
        event_type=node.event_type,
        execution_id=context.execution_id,
        flow_id=context.flow_id,
        node_id=node.id,
        created_at_ms=now_ms,
        correlation_id=context.execution_id,
        filter_condition=dict(node.filter),
        tenant_id=context.tenant_id,
    )


def sleep_duration_ms(node: SleepNode) -> int:
    return parse_duration_ms(
        node.duration, field=f"node {node.id!r} duration", maximum_ms=MAX_WAIT_MS
    )


def wait_timeout_ms(node: EventNode) -> int | None:
    if node.timeout is None:
        return None
    return parse_duration_ms(
        node.timeout, field=f"node {node.id!r} timeout", maximum_ms=MAX_WAIT_MS
    )


class ExecutionStrategy(Protocol):
    """How an execution is driven (E6): each strategy yields the output of every node it ran."""

    mode: str

    def outputs(
        self, flow: Flow, context: ExecutionContext, budget: Budget
    ) -> AsyncIterator[StepOutput]:
        """The outputs of the nodes this call runs, in order."""
        ...


class NormalStrategy:
    """Run from the start node to an end node in this process, waiting in-process (E6)."""

    mode = "normal"

    def __init__(
        self,
        runner: NodeRunner,
        callbacks: CallbackManager,
        *,
        event_waiter: EventWaiter,
        new_id: Callable[[], str],
        now_ms: Callable[[], int],
        sleep: Sleep = asyncio.sleep,
        child_runs: ChildRuns = NO_CHILD_RUNS,
        rate_buckets: RateBuckets = NO_RATE_BUCKETS,
    ) -> None:
        self._runner = runner
        self._rate_buckets = rate_buckets
        self._callbacks = callbacks
        self._children = InProcessChildSteps(child_runs, callbacks)
        self._event_waiter = event_waiter
        self._new_id = new_id
        self._now_ms = now_ms
        self._sleep = sleep

    async def outputs(
        self, flow: Flow, context: ExecutionContext, budget: Budget
    ) -> AsyncIterator[StepOutput]:
        node: BaseNode | None = flow.start_node
        while node is not None:
            if isinstance(node, ParallelNode):
                yield open_fork(node, context, self._callbacks)
                for output in await self._branches(node, flow, context, budget):
                    yield output
                node = flow.node(node.join)
                continue
            output = await self._run_one(node, context, budget)
            yield output
            node = None if output.next_node_id is None else flow.node(output.next_node_id)

    async def _run_one(
        self, node: BaseNode, context: ExecutionContext, budget: Budget
    ) -> StepOutput:
        if isinstance(node, EventNode):
            result, next_id = await self._wait(node, context, budget)
            branch = context.last_branch
        elif isinstance(node, SleepNode):
            result, next_id, branch = await self._nap(node, context, budget), node.next, None
        elif isinstance(node, SubflowNode | MapNode):
            result, next_id, branch = await self._children.run(node, context), node.next, None
        else:
            await self._rate_wait(node, context, budget)
            outcome = await self._runner.run_node(node, context, budget)
            result, next_id, branch = outcome.result, outcome.next_node_id, outcome.branch
        return StepOutput(
            node_id=node.id,
            node_type=node.type,
            result=result,
            branch=branch,
            next_node_id=next_id,
            is_end=next_id is None,
        )

    async def _branches(
        self, node: ParallelNode, flow: Flow, context: ExecutionContext, budget: Budget
    ) -> list[StepOutput]:
        """Each branch walks in its own task until it reaches the join (E12); ``any``
        cancels the others once the first arrived, recording them at the node they had
        reached. The outputs, in the order the nodes finished."""
        outputs: list[StepOutput] = []
        at: dict[str, str] = {}

        async def walk(start: str) -> None:
            current = start
            while current != node.join:
                at[start] = current
                output = await self._run_one(flow.node(current), context, budget)
                outputs.append(output)
                assert output.next_node_id is not None  # a branch never ends (validated)
                current = output.next_node_id

        walkers = {asyncio.ensure_future(walk(start)): start for start in node.branches}
        first = asyncio.FIRST_COMPLETED if node.wait is WaitFor.ANY else asyncio.FIRST_EXCEPTION
        try:
            done, pending = await asyncio.wait(walkers, return_when=first)
            for walker in done:
                walker.result()  # a branch's failure is the execution's
            for walker in pending:  # wait any: the branches left behind
                walker.cancel()
                context.record_node(at[walkers[walker]], dict(CANCELLED_MARKER), None)
        finally:
            for walker in walkers:
                walker.cancel()
            await asyncio.gather(*walkers, return_exceptions=True)
        return outputs

    async def _wait(
        self, node: EventNode, context: ExecutionContext, budget: Budget
    ) -> tuple[JSON, str | None]:
        self._callbacks.on_node_start(context.execution_id, node.id, "event")
        subscription = event_subscription(node, context, self._new_id(), self._now_ms())
        node_timeout_ms = wait_timeout_ms(node)
        waiting = self._event_waiter.wait_for_event(subscription, node_timeout_ms)
        # E5: in-process, the wait is bounded by the execution's budget as well.
        limit = budget.attempt_limit(node_timeout_ms)
        if limit.deadline_bound:
            try:
                event = await asyncio.wait_for(waiting, limit.timeout_seconds)
            except TimeoutError:
                raise deadline_reached(node.id, budget) from None
        else:
            event = await waiting
        return finish_wait(
            node, context, self._callbacks, None if event is None else event.to_json()
        )

    async def _nap(self, node: SleepNode, context: ExecutionContext, budget: Budget) -> JSON:
        self._callbacks.on_node_start(context.execution_id, node.id, "sleep")
        limit = budget.attempt_limit(sleep_duration_ms(node))
        await self._sleep((limit.limit_ms or 0) / 1000)
        if limit.deadline_bound:
            raise deadline_reached(node.id, budget)
        context.record_node(node.id, None, None)
        self._callbacks.on_node_end(context.execution_id, node.id, None, None)
        return None

    async def _rate_wait(self, node: BaseNode, context: ExecutionContext, budget: Budget) -> None:
        """W23: a node with a ``rate_limit`` runs once its bucket gives a token; until then
        this run sleeps (the wait counts against the execution's budget, as a sleep's)."""
        rule = rate_limit_of(context.flow_id, node)
        if rule is None:
            return
        assert isinstance(node, TaskNode | HttpNode)
        try:
            key = rate_key(context.flow_id, node, context)
        except RateLimitKeyError as exc:
            raise key_failure(node.id, exc) from exc
        while True:
            with tenant_scope(context.tenant_id):
                take = await self._rate_buckets.take(key, rule, now_ms=self._now_ms())
            if take.allowed:
                return
            limit = budget.attempt_limit(max(1, take.due_ms - self._now_ms()))
            await self._sleep((limit.limit_ms or 0) / 1000)
            if limit.deadline_bound:
                raise deadline_reached(node.id, budget)


class GeneratorStrategy(NormalStrategy):
    """The Normal walk, handed to the caller one node output at a time (E6)."""

    mode = "generator"


def deadline_reached(node_id: str, budget: Budget) -> ExecutionDeadlineError:
    return ExecutionDeadlineError(
        f"execution deadline of {budget.budget_ms} ms reached at node {node_id!r}",
        node_id=node_id,
    )


def finish_wait(
    node: EventNode, context: ExecutionContext, callbacks: CallbackManager, event: JSON
) -> tuple[JSON, str | None]:
    result: JSON
    if event is None and node.timeout_next is not None:
        result, next_id, branch = dict(TIMEOUT_MARKER), node.timeout_next, "timeout"
    elif event is None:
        # No timeout_next: the node's timeoutHandler decides, as for a task's timeout.
        handler = node.timeout_handler
        if handler.strategy == "abort":
            raise NodeTimeoutError(
                f"event node {node.id!r} timed out waiting for {node.event_type!r} and has no "
                "timeout_next",
                node_id=node.id,
            )
        result = None if handler.strategy == "continue" else handler.default
        next_id, branch = node.next, "timeout"
    else:
        result, next_id, branch = event, node.next, None
    context.record_node(node.id, result, branch)
    callbacks.on_node_end(context.execution_id, node.id, result, branch)
    return result, next_id


def open_fork(
    node: ParallelNode, context: ExecutionContext, callbacks: CallbackManager
) -> StepOutput:
    """A ``parallel`` node ran: its result is None, and its branches start (E12)."""
    callbacks.on_node_start(context.execution_id, node.id, node.type)
    context.record_node(node.id, None, None)
    callbacks.on_node_end(context.execution_id, node.id, None, None)
    return StepOutput(node.id, node.type, None, None, node.branches[0])


def suspended_output(
    node: BaseNode,
    context: ExecutionContext,
    callbacks: CallbackManager,
    suspension: Suspension,
    reason: str,
) -> StepOutput:
    """A node that suspends (Distributed mode): listeners hear it, and it waits where it is."""
    callbacks.on_node_suspend(context.execution_id, node.id, reason)
    callbacks.on_flow_suspend(context.execution_id, node.id)
    return StepOutput(
        node_id=node.id,
        node_type=node.type,
        result=None,
        branch=None,
        next_node_id=node.id,
        suspension=suspension,
    )
