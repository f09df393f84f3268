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
import sysconfig
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.children import NO_CHILD_EXECUTIONS, ChildExecutions
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.distributed import StepKind, StepOutcome
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.engine.runner import NO_HTTP_CLIENT
from plaita.application.engine.strategies import ResumeInput
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import (
    Clock,
    Counters,
    CounterStore,
    HttpClient,
    IdGenerator,
    SubscriptionStore,
)
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.step.attempts import COUNTER_TTL_MS
from plaita.application.use_cases.step.dispatch import (
    DispatchResult,
    Disposition,
    StepSettings,
    ack,
)
from plaita.application.use_cases.step.lease_keeper import KeeperRun
from plaita.application.use_cases.step.rate_gate import RateGate, RateHold, RateLimits
from plaita.application.use_cases.step.tracing import StepTracing, suspended_by
from plaita.application.use_cases.step.waits import WaitRegistrar
from plaita.application.use_cases.step.writes import Writes
from plaita.domain import history
from plaita.domain.budgets import (
    FailureAction,
    classify_step_failure,
    decide_node_failure,
    failed_node_of,
    on_node_success,
    resolve_retry_times,
)
from plaita.domain.envelope import (
    EventPath,
    ResumeType,
    TaskEnvelope,
    continue_copy,
)
from plaita.domain.errors import FlowDefinitionError
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus, NodeFailure
from plaita.domain.failures import FailureKind, FlowErrorException
from plaita.domain.flow import EventNode, Flow
from plaita.domain.history import HistoryEntry
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
        tracing: StepTracing,
        rates: RateLimits,
        http: HttpClient = NO_HTTP_CLIENT,
        children: ChildExecutions = NO_CHILD_EXECUTIONS,
    ) -> None:
        self._children = children
        self._tracing = tracing
        self._rates = rates
        self._flows = flows
        self._http = http
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
        lead: Sequence[HistoryEntry] = (),
        at: str | None = None,
    ) -> DispatchResult:
        """Advance ``state`` (``stored`` is what storage holds: each checkpoint writes only
        what changed since, S3). ``lead`` is what happened before this advance (the resume's
        event or timer); it rides the first checkpoint, with the history of each node run.
        ``at`` is the node the resume wakes when it is not the next one: a branch's wait
        while another branch runs (E12)."""
        worker = held.writes.worker
        pending = list(lead)
        taken_up = stored is None or stored.status is ExecutionStatus.PENDING
        if taken_up:
            pending.insert(
                0,
                history.started(
                    state.created_at_ms if stored is None else self._clock.now_ms(),
                    input_size=history.json_size(state.input),
                    via=held.envelope.kind.value,
                    worker=worker,
                ),
            )
        state, trace = self._tracing.begin(held.envelope, state, stored)
        try:
            self._flows.validate(flow)
        except FlowDefinitionError as exc:
            return await held.writes.fail(state, exc, previous=stored, lead=pending)
        if state.status is ExecutionStatus.PENDING:
            # ADR 0022: seen running (and by which worker) before its start node runs — one
            # save per execution, never per step.
            state = state.transition(ExecutionStatus.RUNNING, now_ms=self._clock.now_ms())
            await held.writes.checkpoint(state, previous=stored, history=pending)
            pending, stored = [], state
        context = ExecutionContext.from_state(state)
        context.cancel_event = held.run.lost
        context.attempts = counters.attempts()  # E15: ctx.attempt across deliveries
        execution = self._execution(flow, context)
        previous = stored
        rates = self._rates.gate(held.envelope, held.writes)
        for _ in range(self._settings.max_steps_per_dispatch):
            node_id, at = at or state.next_node_id, None
            assert node_id is not None, "a non-terminal execution always has a next node"
            gated = await self._rate_gated(
                rates, held, state, flow, node_id, context, counters, previous, pending
            )
            if gated is not None:
                return gated
            started_ms = self._clock.now_ms()
            attempt = counters.attempt(node_id)
            with trace.node(state, flow, node_id, attempt) as span:
                started_at = len(pending)
                pending.append(
                    history.node_started(
                        started_ms, node_id=node_id, attempt=attempt, worker=worker
                    )
                )
                held.run.opened(node_id)
                try:
                    outcome = await execution.astep(
                        node_id=node_id, resume=resume, registrar=self._waits.for_step(state.steps)
                    )
                finally:
                    held.run.closed()
                if node_id in context.rendered_params:  # a task or http node: what it was given
                    pending[started_at] = history.node_started(
                        started_ms,
                        node_id=node_id,
                        attempt=attempt,
                        worker=worker,
                        params=context.rendered_params.pop(node_id),
                        has_params=True,
                    )
                if outcome.inbox_event is not None:
                    pending.append(
                        history.event_received(
                            self._clock.now_ms(),
                            node_id=node_id,
                            worker=worker,
                            event_id=outcome.inbox_event.event_id,
                            event_type=outcome.inbox_event.event_type,
                            via=EventPath.INBOX.value,
                        )
                    )
                if outcome.error is not None:
                    failed_at = context.apply_to(state)
                    failed = await self._node_failed(
                        held,
                        failed_at,
                        flow,
                        outcome.error,
                        counters,
                        previous,
                        pending,
                        started_ms,
                    )
                    span.outcome(failed.outcome, error=_original(outcome.error))
                    return failed
                now_ms = self._clock.now_ms()
                state = apply_step(
                    state,
                    _record(outcome, context),
                    flow=flow,
                    started_ms=started_ms,
                    now_ms=now_ms,
                )
                if outcome.kind is StepKind.SUSPENDED:
                    state = suspended_by(state, span)
                pending += _after_node(state, flow, outcome, attempt, worker, started_ms, now_ms)
                await held.writes.checkpoint(state, previous=previous, history=pending)
                span.outcome(outcome.kind.value)
            pending = []
            counters = await self._succeeded(state.execution_id, counters, outcome.node_id)
            if outcome.consumed_subscription_id is not None:
                await self._subscriptions.remove(outcome.consumed_subscription_id)
            if previous is not None and previous.fork is not None:
                await self._drop_left_behind(previous, state, outcome.consumed_subscription_id)
            previous = state
            if state.status is ExecutionStatus.SUSPENDED:
                return ack("suspended")
            if state.status is ExecutionStatus.COMPLETED:
                return ack("completed")
            resume = None
        hand_over = TaskEnvelope.resume(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            resume_type=ResumeType.CONTINUE,
            now_ms=self._clock.now_ms(),
            tenant_id=state.tenant_id,
            generations=self._settings.generations,
            # W25: the rest of a dispatch that asked for one worker asks for it too.
            target_instance_id=held.envelope.target_instance_id,
            # The rest of an urgent dispatch stays urgent.
            priority=held.envelope.priority,
        )
        return DispatchResult(Disposition.ACK, "yielded", enqueue=(hand_over,), continues=True)

    async def _rate_gated(
        self,
        rates: RateGate,
        held: Held,
        state: ExecutionState,
        flow: Flow,
        node_id: str,
        context: ExecutionContext,
        counters: Counters,
        previous: ExecutionState | None,
        pending: list[HistoryEntry],
    ) -> DispatchResult | None:
        """W23: None when ``node_id`` may run; else the dispatch's answer — held back by its
        rate limit (not an attempt, W2), or failed by a key that does not render."""
        verdict = await rates.check(flow, node_id, context)
        if isinstance(verdict, RateHold):
            return await rates.hold(state, verdict, previous=previous, pending=pending)
        if verdict is None:
            return None
        now_ms = self._clock.now_ms()
        return await self._node_failed(
            held, state, flow, verdict, counters, previous, pending, now_ms
        )

    async def _drop_left_behind(
        self, previous: ExecutionState, state: ExecutionState, consumed: str | None
    ) -> None:
        """Unregister the subscriptions of the branches a ``wait: any`` join left behind
        (E12); their timers fire into nothing, as a consumed wait's do."""
        kept = {wait.subscription_id for wait in state.waits}
        for wait in previous.waits:
            if wait.subscription_id not in kept and wait.subscription_id != consumed:
                await self._subscriptions.remove(wait.subscription_id or "")

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
                http_policy=self._settings.http_policy,
            ),
            callbacks=CallbackManager(self._listeners()),
            http_client=self._http,
            tracer=self._tracing.tracer,
            child_executions=self._children,
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
        pending: list[HistoryEntry],
        started_ms: int,
    ) -> DispatchResult:
        failed_node = failed_node_of(error) or state.next_node_id
        failure = classify_step_failure(error)
        own_retries = (
            flow.node(failed_node).retry_times
            if failed_node is not None and flow.has_node(failed_node)
            else None
        )
        decision = decide_node_failure(
            failure,
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
        now_ms = self._clock.now_ms()
        attempt = counters.attempt(failed_node)
        original = _original(error)
        pending.append(
            history.node_failed(
                now_ms,
                node_id=failed_node,
                attempt=attempt,
                worker=held.writes.worker,
                error_class=type(original).__name__,
                message=str(original),
                traceback=handler_traceback(original),
                failure=failure,
                duration_ms=now_ms - started_ms,
            )
        )
        due = now_ms + (decision.delay_ms or 0) if decision.retries else None
        if failed_node is not None:
            state = attrs.evolve(
                state,
                last_failure=NodeFailure.of(
                    node_id=failed_node,
                    attempt=attempt,
                    error_class=type(original).__name__,
                    message=str(original),
                    transient=failure is FailureKind.TRANSIENT,
                    at_ms=now_ms,
                    retry_at_ms=due,
                ),
            )
        if due is not None:
            pending.append(
                history.retry_scheduled(
                    now_ms,
                    node_id=failed_node,
                    attempt=attempt,
                    worker=held.writes.worker,
                    due_ms=due,
                )
            )
            # Persist where it failed, then (after the lease is released) the delayed copy.
            await held.writes.checkpoint(state, previous=previous, history=pending)
            copy = continue_copy(held.envelope)
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
            return DispatchResult(
                Disposition.ACK,
                "retry_scheduled",
                str(error),
                schedule=((copy, due),),
                continues=True,
            )
        failed = state.transition(
            ExecutionStatus.ERROR, now_ms=now_ms, error=_error_of(error, decision.node_retries)
        )
        assert failed.error is not None
        pending.append(
            history.ended(
                now_ms,
                status=failed.status.value,
                worker=held.writes.worker,
                node_id=failed_node,
                error_code=failed.error.code,
                message=failed.error.message,
            )
        )
        await held.writes.checkpoint(failed, previous=previous, history=pending)
        held.writes.ended(state.execution_id, error)
        if FailureAction.DEAD_LETTER in decision.actions:
            reason = decision.terminal_reason.value if decision.terminal_reason else "failed"
            return DispatchResult(Disposition.DEAD_LETTER, reason, str(error))
        return ack("failed", str(error))


def _after_node(
    state: ExecutionState,
    flow: Flow,
    outcome: StepOutcome,
    attempt: int,
    worker: str,
    started_ms: int,
    now_ms: int,
) -> list[HistoryEntry]:
    """The history of a node that ran to its end: finished, then suspended or ended."""
    node_id = outcome.node_id
    entries = [
        history.node_finished(
            now_ms,
            node_id=node_id,
            attempt=attempt,
            worker=worker,
            result_size=history.json_size(state.node_results.get(node_id)),
            duration_ms=now_ms - started_ms,
        )
    ]
    if outcome.kind is StepKind.SUSPENDED and state.suspension is not None:
        waits_at = state.suspension.node_id
        node = flow.node(waits_at) if flow.has_node(waits_at) else None
        entries.append(
            history.suspended(
                now_ms,
                node_id=waits_at,
                worker=worker,
                event_type=node.event_type if isinstance(node, EventNode) else None,
                timer_due_ms=state.suspension.wake_at_ms,
            )
        )
    elif outcome.kind is StepKind.ENDED:
        entries.append(history.ended(now_ms, status=state.status.value, worker=worker))
    return entries


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


#: Where the frames that call a handler live: the engine (this layer) and the standard
#: library's asyncio and threads it runs handlers on.
_ENGINE = str(Path(__file__).resolve().parents[2])
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve())


def _calls_handlers(filename: str) -> bool:
    path = str(Path(filename).resolve())
    if path.startswith(_ENGINE):
        return True
    return path.startswith(_STDLIB) and "-packages" not in path  # site- or dist-packages


def handler_traceback(error: BaseException) -> str:
    """The traceback of what a node raised, from its first frame outside the engine and the
    standard library (the handler's own code) on: the frames that called the handler tell an
    operator nothing. All of it when there is no such frame (the engine itself raised)."""
    report = traceback.TracebackException.from_exception(error)
    frames = list(report.stack)
    first = next((i for i, f in enumerate(frames) if not _calls_handlers(f.filename)), 0)
    report.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(report.format())


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
