"""The Distributed strategy (E6): exactly one node per call, from a checkpoint position.

A worker calls it once per step and gets a ``StepOutcome`` back — the step advanced to a next
node, suspended at a wait, ended the flow, or its node failed — never a half-told story:

- a wait registers its subscription or timer through the ``SuspensionRegistrar`` the caller
  hands in, which answers with a value — a ``Suspension``, or a ``ReadyEvent`` when the
  event was already in the inbox (V6). A ready event resumes the wait in the same step, so
  listeners hear no suspension for it;
- a node failure is an outcome, not the end of the flow: the caller judges it (a retry, or
  terminal) and tells listeners when the flow really ended.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.child_steps import ChildSteps
from plaita.application.engine.children import NO_CHILD_EXECUTIONS, ChildExecutions
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.runner import Budget, NodeRunner
from plaita.application.engine.strategies import (
    ResumeInput,
    StepOutput,
    finish_wait,
    open_fork,
    suspended_output,
)
from plaita.domain.envelope import ResumeType
from plaita.domain.errors import ResumeProtocolError
from plaita.domain.events import Event
from plaita.domain.execution import Suspension
from plaita.domain.failures import ExecutionCancelledError, FlowErrorException
from plaita.domain.flow import (
    BaseNode,
    EndNode,
    EventNode,
    Flow,
    MapNode,
    ParallelNode,
    SleepNode,
    SubflowNode,
)

JSON = Any


@attrs.frozen
class ReadyEvent:
    """A wait that found its event already there (V6): the step resumes it at once."""

    subscription_id: str
    event: Event


#: What registering a wait answers: suspend on this, or take this event now.
WaitRegistration = Suspension | ReadyEvent


class SuspensionRegistrar(Protocol):
    async def register_event_wait(
        self, node: EventNode, context: ExecutionContext
    ) -> WaitRegistration:
        """Register the subscription (and its timeout timer) before the execution suspends;
        or the event that already waits for it in the inbox."""
        ...

    async def register_timer(self, node: SleepNode, context: ExecutionContext) -> Suspension:
        """Register a durable timer for a ``sleep`` node before the execution suspends."""
        ...


class StepKind(enum.StrEnum):
    ADVANCED = "advanced"
    SUSPENDED = "suspended"
    ENDED = "ended"
    NODE_FAILED = "node_failed"


@attrs.frozen
class StepOutcome:
    """One step, told whole: what happened, the node's output or its failure, and the
    subscription whose event the step consumed (to unregister once it is checkpointed)."""

    kind: StepKind
    node_id: str
    output: StepOutput | None = None
    error: FlowErrorException | None = None
    consumed_subscription_id: str | None = None
    #: The event a wait took from the inbox in this step (V6), for the history.
    inbox_event: Event | None = None

    @classmethod
    def of(
        cls, output: StepOutput, consumed: str | None = None, inbox_event: Event | None = None
    ) -> StepOutcome:
        if output.suspension is not None:
            kind = StepKind.SUSPENDED
        elif output.is_end:
            kind = StepKind.ENDED
        else:
            kind = StepKind.ADVANCED
        return cls(
            kind,
            output.node_id,
            output,
            consumed_subscription_id=consumed,
            inbox_event=inbox_event,
        )

    @classmethod
    def failed(cls, node_id: str, error: BaseException) -> StepOutcome:
        """E8: the failure flattened to ``FlowErrorException(-500)``, the original its cause."""
        node = getattr(error, "node_id", None) or node_id
        flattened = FlowErrorException(f"{type(error).__name__}: {error}", node_id=node)
        flattened.__cause__ = error
        return cls(StepKind.NODE_FAILED, node, error=flattened)


class DistributedStrategy:
    """Advance exactly one node per call from a checkpoint (E6)."""

    mode = "distributed"

    def __init__(
        self,
        runner: NodeRunner,
        callbacks: CallbackManager,
        children: ChildExecutions = NO_CHILD_EXECUTIONS,
    ) -> None:
        self._runner = runner
        self._callbacks = callbacks
        self._children = ChildSteps(children, callbacks)

    async def step(
        self,
        flow: Flow,
        context: ExecutionContext,
        *,
        node_id: str,
        resume: ResumeInput | None,
        registrar: SuspensionRegistrar,
        budget: Budget,
    ) -> StepOutcome:
        """The outcome of running ``node_id``; a failure raises (the caller flattens it)."""
        node = flow.node(node_id)
        if isinstance(node, SubflowNode | MapNode):
            return await self._child_step(node, context, resume)
        if isinstance(node, ParallelNode):
            # The fork opens in the checkpoint (apply_step): one token per branch (E12).
            return StepOutcome.of(open_fork(node, context, self._callbacks))
        if resume is not None and resume.resume_type not in (ResumeType.CONTINUE, ResumeType.RETRY):
            return StepOutcome.of(self._resume(node, context, resume), resume.subscription_id)
        if isinstance(node, EventNode):
            return await self._wait(node, context, registrar)
        if isinstance(node, SleepNode):
            self._callbacks.on_node_start(context.execution_id, node.id, node.type)
            suspension = await registrar.register_timer(node, context)
            return StepOutcome.of(self._suspended(node, context, suspension, "sleeping"))
        # E15: one attempt per step; a retry is the caller's delayed carrier, never a sleep here.
        outcome = await self._runner.run_node(node, context, budget, durable=True)
        return StepOutcome.of(
            StepOutput(
                node_id=node.id,
                node_type=node.type,
                result=outcome.result,
                branch=outcome.branch,
                next_node_id=outcome.next_node_id,
                is_end=isinstance(node, EndNode) or outcome.next_node_id is None,
            )
        )

    async def _child_step(
        self, node: SubflowNode | MapNode, context: ExecutionContext, resume: ResumeInput | None
    ) -> StepOutcome:
        kind = None if resume is None else resume.resume_type
        if resume is None or kind in (ResumeType.CONTINUE, ResumeType.RETRY):
            return StepOutcome.of(await self._children.begin(node, context))
        if kind in (ResumeType.CHILD, ResumeType.TIMEOUT):
            self._callbacks.on_flow_resume(context.execution_id, node.id, resume.resume_type.value)
            return StepOutcome.of(await self._children.resume(node, context, resume))
        return StepOutcome.of(self._resume(node, context, resume))  # a cancel raises there

    async def _wait(
        self, node: EventNode, context: ExecutionContext, registrar: SuspensionRegistrar
    ) -> StepOutcome:
        self._callbacks.on_node_start(context.execution_id, node.id, node.type)
        registered = await registrar.register_event_wait(node, context)
        if isinstance(registered, ReadyEvent):
            # V6: the event came first; the wait ends in this very step, never suspended.
            result, next_id = finish_wait(
                node, context, self._callbacks, registered.event.to_json()
            )
            output = StepOutput(node.id, node.type, result, None, next_id, is_end=next_id is None)
            return StepOutcome.of(output, registered.subscription_id, registered.event)
        waiting = f"waiting for {node.event_type}"
        return StepOutcome.of(self._suspended(node, context, registered, waiting))

    def _suspended(
        self, node: BaseNode, context: ExecutionContext, suspension: Suspension, reason: str
    ) -> StepOutput:
        return suspended_output(node, context, self._callbacks, suspension, reason)

    def _resume(self, node: BaseNode, context: ExecutionContext, resume: ResumeInput) -> StepOutput:
        kind = resume.resume_type
        self._callbacks.on_flow_resume(context.execution_id, node.id, kind.value)
        if kind is ResumeType.CANCEL:
            raise ExecutionCancelledError(
                f"execution cancelled at node {node.id!r}", node_id=node.id
            )
        if isinstance(node, EventNode) and kind is ResumeType.EVENT:
            result, next_id = finish_wait(node, context, self._callbacks, resume.event)
        elif isinstance(node, EventNode) and kind is ResumeType.TIMEOUT:
            result, next_id = finish_wait(node, context, self._callbacks, None)
        elif isinstance(node, SleepNode) and kind is ResumeType.TIMEOUT:
            context.record_node(node.id, None, None)
            self._callbacks.on_node_end(context.execution_id, node.id, None, None)
            result, next_id = None, node.next
        else:
            raise ResumeProtocolError(
                f"a {kind.value} resume cannot wake {node.type} node {node.id!r}"
            )
        return StepOutput(
            node_id=node.id,
            node_type=node.type,
            result=result,
            branch=None,
            next_node_id=next_id,
            is_end=next_id is None,
        )
