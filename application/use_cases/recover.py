"""Give executions their ways forward back after a restart that lost the in-memory queue (S4).

`plaita dev --db` keeps state and definitions in a database but its task queue, delay queue
and subscriptions in memory. When the process restarts, every carrier, timer and
subscription is gone while the checkpoints remain — invariant I0 would be broken for every
live execution. This use case restores it from the checkpoints alone: a ``running`` or
``pending`` execution gets a continue carrier (it continues from its checkpoint, never from
its first node, W6/W7); a ``suspended`` one gets its wait back — the timer of a ``sleep`` or of an
``event`` timeout is scheduled again for its recorded ``wake_at_ms`` (at once when that
already passed), and an ``event`` wait's subscription is registered again under its own id,
so a later event resumes it exactly as before the restart.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import attrs

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.strategies import event_subscription
from plaita.application.ports import (
    Clock,
    DelayQueue,
    ExecutionRepository,
    SubscriptionStore,
    TaskQueue,
)
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.errors import UnknownFlowError
from plaita.domain.execution import ExecutionState, ExecutionStatus, Suspension
from plaita.domain.flow import EventNode

log = logging.getLogger("plaita.recover")

PAGE_SIZE = 200


@attrs.frozen
class RecoveryReport:
    #: Executions whose state was stored but missing from the listing index, put back first.
    reindexed: int = 0
    continued: int = 0
    timers: int = 0
    subscriptions: int = 0
    #: Suspended executions whose flow or node is gone: left as they are, named in the log.
    skipped: int = 0

    def to_json(self) -> dict[str, int]:
        return attrs.asdict(self)


class RecoverAfterRestart:
    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        queue: TaskQueue,
        delay: DelayQueue,
        subscriptions: SubscriptionStore,
        flows: FlowCatalog,
        clock: Clock,
        generations: CarrierGenerations,
    ) -> None:
        self._generations = generations
        self._executions = executions
        self._queue = queue
        self._delay = delay
        self._subscriptions = subscriptions
        self._flows = flows
        self._clock = clock

    async def __call__(self) -> RecoveryReport:
        """Restore the carriers, timers and subscriptions of the current tenant's executions."""
        report = RecoveryReport(reindexed=await self._executions.reindex())
        for status in (ExecutionStatus.PENDING, ExecutionStatus.RUNNING):
            async for state in self._states(status):
                await self._queue.enqueue(self._carrier(state, ResumeType.CONTINUE, None))
                report = attrs.evolve(report, continued=report.continued + 1)
                for wait in state.waits:  # a branch that waits while another runs (E12)
                    report = await self._restore_wait(state, wait, report)
        async for state in self._states(ExecutionStatus.SUSPENDED):
            held: tuple[Suspension | None, ...] = state.waits or (None,)
            for waiting in held:
                report = await self._restore_wait(state, waiting, report)
        log.info(
            "event=recover.done reindexed=%d continued=%d timers=%d subscriptions=%d skipped=%d",
            report.reindexed,
            report.continued,
            report.timers,
            report.subscriptions,
            report.skipped,
        )
        return report

    async def _restore_wait(
        self, state: ExecutionState, suspension: Suspension | None, report: RecoveryReport
    ) -> RecoveryReport:
        if suspension is None or suspension.subscription_id is None:
            return attrs.evolve(report, skipped=report.skipped + 1)
        if suspension.wake_at_ms is not None:
            carrier = self._carrier(state, ResumeType.TIMEOUT, suspension.subscription_id)
            await self._delay.schedule(carrier, due_ms=suspension.wake_at_ms)
            report = attrs.evolve(report, timers=report.timers + 1)
        try:
            flow = await self._flows.get(state.flow_id, state.flow_version)
        except UnknownFlowError as exc:
            log.warning(
                "event=recover.skipped execution_id=%s reason=%r", state.execution_id, str(exc)
            )
            return attrs.evolve(report, skipped=report.skipped + 1)
        node = flow.node(suspension.node_id) if flow.has_node(suspension.node_id) else None
        if isinstance(node, EventNode):
            subscription = event_subscription(
                node,
                ExecutionContext.from_state(state),
                suspension.subscription_id,
                self._clock.now_ms(),
            )
            await self._subscriptions.add(subscription)
            report = attrs.evolve(report, subscriptions=report.subscriptions + 1)
        return report

    async def _states(self, status: ExecutionStatus) -> AsyncIterator[ExecutionState]:
        cursor: str | None = None
        while True:
            page = await self._executions.page(status=status, limit=PAGE_SIZE, cursor=cursor)
            for state in page.items:
                yield state
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def _carrier(
        self, state: ExecutionState, kind: ResumeType, subscription_id: str | None
    ) -> TaskEnvelope:
        return TaskEnvelope.resume(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            resume_type=kind,
            subscription_id=subscription_id,
            now_ms=self._clock.now_ms(),
            tenant_id=state.tenant_id,
            generations=self._generations,
        )
