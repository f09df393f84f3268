"""Child executions across processes (E13, E14): a worker's ``ChildExecutions``, and what
the end of a parent or of a child does to the other.

- ``WorkerChildren`` starts a subflow's or map's children through ``StartExecution`` (their
  ids derived from the parent's, each its own dedup key: a re-run of the parent's step starts
  none twice), reads how they ended from their own states, cancels them as an operator would
  (W23), and arms the parent's own check on them in the delay queue.
- ``ChildLinks`` is told of every save that ends an execution (``AnnouncingExecutions``):
  a child's end sends its parent a ``child`` carrier — best effort, the parent's own check
  finds an end whose carrier was lost — and a parent's end while it waits for its children
  cancels the ones still running, unless its node said ``on_parent_end: abandon``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from plaita.application.engine.children import ChildStart
from plaita.application.engine.context import ExecutionContext
from plaita.application.ports import Clock, DelayQueue, ExecutionRepository, IdGenerator, TaskQueue
from plaita.application.tenancy import tenant_scope
from plaita.domain.child_outcomes import ChildOutcome, outcome_of
from plaita.domain.children import CHILD_CHECK_INTERVAL_MS, child_execution_id
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import PlaitaError
from plaita.domain.execution import ExecutionState, ParentLink, Suspension
from plaita.domain.failures import ChildExecutionError
from plaita.domain.flow import ChildNode

log = logging.getLogger("plaita.children")

#: Children read (or cancelled) at once, at most.
CHILD_BATCH = 100

#: Starts one child: (flow id, version, input, child id, tenant, parent link).
StartChild = Callable[..., Awaitable[object]]
#: Cancels one execution as an operator would (W23); refuses one that has ended.
CancelOne = Callable[[str], Awaitable[object]]


class WorkerChildren:
    """``ChildExecutions`` of a worker."""

    def __init__(
        self,
        *,
        start: StartChild,
        cancel: CancelOne,
        executions: ExecutionRepository,
        delay: DelayQueue,
        clock: Clock,
        ids: IdGenerator,
        generations: CarrierGenerations,
        links: ChildLinks | None = None,
        check_interval_ms: int = CHILD_CHECK_INTERVAL_MS,
    ) -> None:
        """``links`` repeats a child's end notice to its parent (``notify_parent``)."""
        self._links = links
        self._start = start
        self._cancel = cancel
        self._executions = executions
        self._delay = delay
        self._clock = clock
        self._ids = ids
        self._generations = generations
        self._check_interval_ms = check_interval_ms

    async def start(
        self, parent: ExecutionContext, node: ChildNode, children: Sequence[ChildStart]
    ) -> None:
        for first in range(0, len(children), CHILD_BATCH):
            batch = children[first : first + CHILD_BATCH]
            await asyncio.gather(*(self._start_one(parent, node, child) for child in batch))

    async def _start_one(
        self, parent: ExecutionContext, node: ChildNode, child: ChildStart
    ) -> None:
        link = ParentLink(parent.execution_id, parent.flow_id, node.id, child.index)
        try:
            with tenant_scope(parent.tenant_id):
                await self._start(
                    node.flow_id,
                    version=node.version,
                    params=child.input,
                    execution_id=child.child_id,
                    dedup_key=child.child_id,
                    tenant_id=parent.tenant_id,
                    parent=link,
                )
        except PlaitaError as exc:  # an unknown flow, a refused input: the node's failure
            raise ChildExecutionError(
                f"{node.type} node {node.id!r} cannot start its child {child.child_id} "
                f"of flow {node.flow_id!r}: {exc}"
            ) from exc

    async def outcomes(self, child_ids: Sequence[str]) -> list[ChildOutcome | None]:
        found: list[ChildOutcome | None] = []
        for first in range(0, len(child_ids), CHILD_BATCH):
            batch = child_ids[first : first + CHILD_BATCH]
            states = await asyncio.gather(*(self._executions.load(c) for c in batch))
            found += [outcome_of(c, s) for c, s in zip(batch, states, strict=True)]
        return found

    async def cancel(self, child_ids: Sequence[str]) -> None:
        for first in range(0, len(child_ids), CHILD_BATCH):
            batch = child_ids[first : first + CHILD_BATCH]
            await asyncio.gather(*(self._cancel_one(c) for c in batch))

    async def _cancel_one(self, child_id: str) -> None:
        try:
            await self._cancel(child_id)
        except PlaitaError as exc:  # it ended (or was deleted) in between: nothing to do
            log.info("event=child.cancel_skipped execution_id=%s reason=%r", child_id, str(exc))

    async def watch(self, parent: ExecutionContext) -> tuple[str, int]:
        timer_id = self._ids.new_id()
        due = self._clock.now_ms() + self._check_interval_ms
        carrier = TaskEnvelope.resume(
            execution_id=parent.execution_id,
            flow_id=parent.flow_id,
            resume_type=ResumeType.TIMEOUT,
            subscription_id=timer_id,
            now_ms=self._clock.now_ms(),
            tenant_id=parent.tenant_id,
            generations=self._generations,
        )
        await self._delay.schedule(carrier, due_ms=due)
        return timer_id, due

    async def notify_parent(self, child: ExecutionState) -> None:
        if self._links is not None and child.parent is not None:
            await self._links.tell_parent(child, child.parent)


def running_children(state: ExecutionState, waiting: Suspension | None) -> list[str]:
    """The children ``state``'s execution waited for, still running as far as it knew."""
    if waiting is None or waiting.abandon_children:
        return []
    if waiting.child_id is not None:
        return [waiting.child_id]
    if waiting.map is None:
        return []
    return [
        child_execution_id(state.execution_id, waiting.node_id, index)
        for index in waiting.map.running_indexes()
    ]


class ChildLinks:
    """What an execution's end does to its parent, and to its children."""

    def __init__(
        self,
        *,
        queue: TaskQueue,
        cancel: CancelOne,
        clock: Clock,
        generations: CarrierGenerations,
    ) -> None:
        self._queue = queue
        self._cancel = cancel
        self._clock = clock
        self._generations = generations

    async def ended(self, previous: ExecutionState | None, state: ExecutionState) -> None:
        """``state`` was saved as the end of its execution (``previous`` the state before)."""
        if state.parent is not None:
            await self.tell_parent(state, state.parent)
        waiting = previous.suspension if previous is not None else None
        await self.cascade(state, waiting)

    async def cascade(self, state: ExecutionState, waiting: Suspension | None) -> None:
        """Cancel the children ``state``'s execution was waiting for (its end or delete)."""
        children = running_children(state, waiting)
        if not children:
            return
        cancel = self._cancel
        log.info(
            "event=children.cancelled parent=%s node_id=%s children=%d",
            state.execution_id,
            waiting.node_id if waiting else None,
            len(children),
        )
        with tenant_scope(state.tenant_id):
            for child_id in children:
                try:
                    await cancel(child_id)
                except PlaitaError as exc:
                    log.info(
                        "event=child.cancel_skipped execution_id=%s reason=%r", child_id, str(exc)
                    )

    async def tell_parent(self, state: ExecutionState, parent: ParentLink) -> None:
        """Send ``parent`` a ``child`` carrier: ``state``'s execution ended (best effort)."""
        carrier = TaskEnvelope.resume(
            execution_id=parent.execution_id,
            flow_id=parent.flow_id,
            resume_type=ResumeType.CHILD,
            subscription_id=state.execution_id,
            event={
                "child_id": state.execution_id,
                "node_id": parent.node_id,
                "index": parent.index,
                "status": state.status.value,
            },
            now_ms=self._clock.now_ms(),
            tenant_id=state.tenant_id,
            generations=self._generations,
        )
        try:
            await self._queue.enqueue(carrier)
        except Exception as exc:
            log.warning(
                "event=child.notice_failed execution_id=%s parent=%s error=%r: the parent "
                "finds this end at its next check on its children",
                state.execution_id,
                parent.execution_id,
                exc,
            )
