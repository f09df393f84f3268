"""The step loop (W1, W8, E15): run the next node, checkpoint what it did, until the execution
suspends, ends, fails, or has run enough for one dispatch.

Each turn asks the engine for one ``StepOutcome`` and the domain for what the checkpoint
says after it (``apply_step``); a failed node goes to ``decide_node_failure``, which either
retries it through the delay queue (checkpoint, then — after the lease is released — the
delayed copy) or ends the execution. A dispatch that ran ``max_steps_per_dispatch`` nodes
hands over to a fresh carrier, enqueued once the lease is released (W5, I0).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.distributed import StepKind, StepOutcome
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.engine.strategies import ResumeInput
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import Clock, Counters, CounterStore, IdGenerator, SubscriptionStore
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.step.attempts import COUNTER_TTL_MS
from plaita.application.use_cases.step.dispatch import (
    DispatchResult,
    Disposition,
    StepSettings,
    ack,
)
from plaita.application.use_cases.step.lease_keeper import KeeperRun
from plaita.application.use_cases.step.waits import WaitRegistrar
from plaita.application.use_cases.step.writes import Writes
from plaita.domain.budgets import (
    FailureAction,
    classify_step_failure,
    decide_node_failure,
    failed_node_of,
    on_node_success,
    resolve_retry_times,
)
from plaita.domain.envelope import CarrierKind, ResumeType, TaskEnvelope, copy_envelope
from plaita.domain.errors import FlowDefinitionError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus
from plaita.domain.failures import FlowErrorException
from plaita.domain.flow import Flow
from plaita.domain.step import StepRecord, apply_step

log = logging.getLogger("plaita.worker.step")


@attrs.frozen
class Held:
    """One dispatch under its lease: the carrier, its watchdog, and its writes."""

    envelope: TaskEnvelope
    run: KeeperRun
    writes: Writes


class Advance:
    def __init__(
        self,
        *,
        flows: FlowCatalog,
        handlers: HandlerRegistry,
        counters: CounterStore,
        subscriptions: SubscriptionStore,
        waits: WaitRegistrar,
        clock: Clock,
        ids: IdGenerator,
        settings: StepSettings,
        listeners: Callable[[], list[object]],
    ) -> None:
        self._flows = flows
        self._handlers = handlers
        self._counters = counters
        self._subscriptions = subscriptions
        self._waits = waits
        self._clock = clock
        self._ids = ids
        self._settings = settings
        self._listeners = listeners

    async def run(
        self,
        held: Held,
        state: ExecutionState,
        flow: Flow,
        *,
        resume: ResumeInput | None,
        counters: Counters,
        stored: ExecutionState | None,
    ) -> DispatchResult:
        """Advance ``state`` (``stored`` is what storage holds: each checkpoint writes only
        what changed since, S3)."""
        try:
            self._flows.validate(flow)
        except FlowDefinitionError as exc:
            return await held.writes.fail(state, exc, previous=stored)
        context = ExecutionContext.from_state(state)
        context.cancel_event = held.run.lost
        context.attempts = counters.attempts()  # E15: ctx.attempt across deliveries
        execution = self._execution(flow, context)
        previous = stored
        for _ in range(self._settings.max_steps_per_dispatch):
            node_id = state.next_node_id
            assert node_id is not None, "a non-terminal execution always has a next node"
            started_ms = self._clock.now_ms()
            held.run.opened(node_id)
            try:
                outcome = await execution.astep(
                    node_id=node_id, resume=resume, registrar=self._waits.for_step(state.steps)
                )
            finally:
                held.run.closed()
            if outcome.error is not None:
                failed_at = context.apply_to(state)
                return await self._node_failed(
                    held, failed_at, flow, outcome.error, counters, previous
                )
            state = apply_step(
                state,
                _record(outcome, context),
                flow=flow,
                started_ms=started_ms,
                now_ms=self._clock.now_ms(),
            )
            await held.writes.checkpoint(state, previous=previous)
            previous = state
            counters = await self._succeeded(state.execution_id, counters, outcome.node_id)
            if outcome.consumed_subscription_id is not None:
                await self._subscriptions.remove(outcome.consumed_subscription_id)
            if outcome.kind is StepKind.SUSPENDED:
                return ack("suspended")
            if outcome.kind is StepKind.ENDED:
                return ack("completed")
            resume = None
        hand_over = TaskEnvelope.resume(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            resume_type=ResumeType.CONTINUE,
            now_ms=self._clock.now_ms(),
            tenant_id=state.tenant_id,
            generations=self._settings.generations,
        )
        return DispatchResult(Disposition.ACK, "yielded", enqueue=(hand_over,))

    def _execution(self, flow: Flow, context: ExecutionContext) -> FlowExecution:
        return FlowExecution(
            flow,
            context,
            handlers=self._handlers,
            clock=self._clock,
            new_id=self._ids.new_id,
            options=RunOptions(
                mode="distributed",
                default_deadline_ms=self._settings.default_deadline_ms,
                default_retries=self._settings.default_retries,
            ),
            callbacks=CallbackManager(self._listeners()),
        )

    async def _succeeded(self, execution_id: str, counters: Counters, node_id: str) -> Counters:
        # Skipped when there is nothing to clear: a steady-state step stays within P2.
        if not (
            counters.node_retries.get(node_id)
            or counters.node_crashes.get(node_id)
            or counters.no_fail
        ):
            return counters
        return await self._counters.apply(
            execution_id, on_node_success(node_id), ttl_ms=COUNTER_TTL_MS
        )

    async def _node_failed(
        self,
        held: Held,
        state: ExecutionState,
        flow: Flow,
        error: FlowErrorException,
        counters: Counters,
        previous: ExecutionState | None,
    ) -> DispatchResult:
        failed_node = failed_node_of(error) or state.next_node_id
        own_retries = (
            flow.node(failed_node).retry_times
            if failed_node is not None and flow.has_node(failed_node)
            else None
        )
        decision = decide_node_failure(
            classify_step_failure(error),
            failed_node=failed_node,
            attempt=counters.attempt(failed_node),
            retry_times=resolve_retry_times(own_retries, self._settings.default_retries),
            node_retries=counters.node_retries.get(failed_node or "", 0),
            total_retries=counters.total_retries,
        )
        if decision.counter_changes and not held.run.lost.is_set():
            # Counted before the checkpoint: a crash in between over-counts, never under-counts.
            await self._counters.apply(
                state.execution_id, decision.counter_changes, ttl_ms=COUNTER_TTL_MS
            )
        if decision.retries:
            # Persist where it failed, then (after the lease is released) the delayed copy.
            await held.writes.checkpoint(state, previous=previous)
            copy = copy_envelope(
                held.envelope,
                kind=CarrierKind.RESUME,
                resume_type=ResumeType.CONTINUE,
                event=None,
                subscription_id=None,
                dedup_key=None,
            )
            log.warning(
                "event=node.retry_scheduled execution_id=%s node_id=%s attempt=%d retry=%d "
                "delay_ms=%s error=%r",
                state.execution_id,
                failed_node,
                counters.attempt(failed_node),
                decision.node_retries + 1,
                decision.delay_ms,
                str(_original(error)),
            )
            due = self._clock.now_ms() + (decision.delay_ms or 0)
            return DispatchResult(
                Disposition.ACK, "retry_scheduled", str(error), schedule=((copy, due),)
            )
        failed = state.transition(
            ExecutionStatus.ERROR,
            now_ms=self._clock.now_ms(),
            error=_error_of(error, decision.node_retries),
        )
        await held.writes.checkpoint(failed, previous=previous)
        held.writes.ended(state.execution_id, error)
        if FailureAction.DEAD_LETTER in decision.actions:
            reason = decision.terminal_reason.value if decision.terminal_reason else "failed"
            return DispatchResult(Disposition.DEAD_LETTER, reason, str(error))
        return ack("failed", str(error))


def _record(outcome: StepOutcome, context: ExecutionContext) -> StepRecord:
    output = outcome.output
    assert output is not None
    ended = output.is_end and output.suspension is None
    return StepRecord(
        node_id=output.node_id,
        variables=context.variables,
        node_results=context.node_results,
        last_node_id=context.last_node_id,
        last_branch=context.last_branch,
        suspension=output.suspension,
        is_end=ended,
        result=output.result,
        next_node_id=None if ended or output.suspension is not None else output.next_node_id,
    )


def _original(exc: BaseException) -> BaseException:
    """The handler's own exception under the engine's wrappers (for logs)."""
    seen: list[BaseException] = []
    while exc.__cause__ is not None and len(seen) < 32:
        seen.append(exc)
        exc = exc.__cause__
    return exc


def _error_of(exc: FlowErrorException, node_retries: int) -> ExecutionError:
    cause = exc.__cause__
    code = getattr(cause, "code", exc.code)
    message = str(cause) if cause is not None else exc.message
    if node_retries:
        message = f"{message} (after {node_retries} retries)"
    return ExecutionError(
        code=code if isinstance(code, int) else exc.code,
        message=message,
        node_id=exc.node_id,
        kind=type(cause).__name__ if cause is not None else type(exc).__name__,
    )
