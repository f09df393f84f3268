"""The worker step: take one carrier, advance its execution under the lease, checkpoint (W1-W15).

Every rule is the domain's: this use case gathers the facts (state, counters, lease holder,
tombstone), asks the pure decision functions, and performs their answer through ports. The
caller acks only on ``Disposition.ACK``; every path that could leave an execution without a
carrier answers ``LEAVE_PENDING`` instead (invariant I0, W5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from plaita.application.engine.callbacks import CallbackManager
from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.engine.strategies import (
    ResumeInput,
    StepOutput,
)
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import (
    Clock,
    CounterStore,
    DedupStore,
    DelayQueue,
    ExecutionControls,
    ExecutionRepository,
    IdGenerator,
    Inbox,
    LeaseManager,
    SubscriptionStore,
    TaskQueue,
    WorkerRegistry,
)
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.carrier_gates import CarrierGates
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.dispatch import (
    DispatchResult,
    Disposition,
    StepSettings,
)
from plaita.application.use_cases.dispatch import (
    ack as _ack,
)
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.lease_keeper import Dispatch, LeaseKeeper
from plaita.application.use_cases.suspensions import WaitRegistrar
from plaita.domain.budgets import (
    COUNTER_TTL_SECONDS,
    FailureAction,
    classify_step_failure,
    decide_crashed_attempts,
    decide_node_failure,
    decide_wakeup,
    failed_node_of,
    on_node_success,
    resolve_retry_times,
)
from plaita.domain.dedup import StartKind, StartRequest, StoredExecution, decide_start
from plaita.domain.envelope import (
    CarrierKind,
    ResumeType,
    TaskEnvelope,
    copy_envelope,
)
from plaita.domain.errors import (
    ExecutionLeaseError,
    FlowDefinitionError,
    LeaseLostError,
    UnknownFlowError,
)
from plaita.domain.execution import (
    ExecutionError,
    ExecutionState,
    ExecutionStatus,
    Suspension,
    node_timing,
)
from plaita.domain.failures import CODE_CANCELLED, FlowErrorException
from plaita.domain.flow import Flow
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.resume import (
    CurrentDefinition,
    ExecutionView,
    ResumeDecision,
    ResumeKind,
    ResumeRequest,
    decide_resume,
)

JSON = Any
log = logging.getLogger("plaita.worker.step")

COUNTER_TTL_MS = COUNTER_TTL_SECONDS * 1000


class ProcessTask:
    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        leases: LeaseManager,
        flows: FlowCatalog,
        queue: TaskQueue,
        subscriptions: SubscriptionStore,
        handlers: HandlerRegistry,
        clock: Clock,
        ids: IdGenerator,
        settings: StepSettings,
        counters: CounterStore,
        delay: DelayQueue,
        registry: WorkerRegistry | None = None,
        dedup: DedupStore | None = None,
        inbox: Inbox | None = None,
        controls: ExecutionControls | None = None,
        listeners: Callable[[], list[object]] = list,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._executions = executions
        self._leases = leases
        self._flows = flows
        self._queue = queue
        self._subscriptions = subscriptions
        self._handlers = handlers
        self._clock = clock
        self._ids = ids
        self._settings = settings
        self._counters = counters
        self._delay = delay
        self._registry = registry
        self._dedup = dedup
        self._carrier_gates = CarrierGates(
            clock=clock,
            settings=settings,
            leases=leases,
            executions=executions,
            registry=registry,
            dedup=dedup,
            controls=controls,
            queue=queue,
        )
        self._listeners = listeners
        self._sleep = sleep
        self._keeper = LeaseKeeper(
            leases=leases,
            executions=executions,
            queue=queue,
            clock=clock,
            holder_id=settings.holder_id,
            lease_ttl_ms=settings.lease_ttl_ms,
            sleep=sleep,
        )
        self._waits = WaitRegistrar(
            subscriptions=subscriptions,
            delay=delay,
            clock=clock,
            ids=ids,
            generations=settings.generations,
            inbox=inbox,
        )
        self._claims = None if dedup is None else DedupClaims(dedup=dedup, executions=executions)

    async def __call__(
        self, envelope: TaskEnvelope, *, message_id: str | None = None, reclaimed: bool = False
    ) -> DispatchResult:
        """Advance the carrier's execution, inside the carrier's tenant (W24)."""
        with tenant_scope(envelope.tenant_id):
            return await self._process(envelope, message_id, reclaimed)

    def foreign(self, envelope: TaskEnvelope, message_id: str | None) -> DispatchResult | None:
        """Left pending when written under another pool's family or budget (W12), else None."""
        return self._carrier_gates.foreign(envelope, message_id)

    async def _process(
        self, envelope: TaskEnvelope, message_id: str | None, reclaimed: bool
    ) -> DispatchResult:
        refused = await self._carrier_gates.before_lease(envelope, message_id)
        if refused is not None:
            return refused
        parked, flags = await self._carrier_gates.admit(envelope, message_id)  # W23: parked
        if parked is not None:
            return parked
        lease = await self._leases.acquire(
            envelope.execution_id, self._settings.holder_id, ttl_ms=self._settings.lease_ttl_ms
        )
        if lease is None:
            return await self._carrier_gates.on_conflict(envelope, reclaimed)
        # Set when the lease is lost: the running handler sees ctx.cancelled, and no further
        # checkpoint is written by this holder (it fences itself off).
        dispatch = Dispatch(envelope, lease, threading.Event(), message_id)
        keeper = self._keeper.start(dispatch)
        try:
            result = await self._dispatch(dispatch, flags)
        except ExecutionLeaseError as exc:
            # W4: a fenced-off writer must not ack; the new holder owns the carrier's fate.
            outcome = "lease_lost" if isinstance(exc, LeaseLostError) else "fenced"
            result = DispatchResult(Disposition.LEAVE_PENDING, outcome, str(exc))
        except Exception:
            # Not a crash (the dispatch returned, with an error): its attempt is ended, and the
            # carrier stays pending for a redelivery that meets the checkpoint.
            await keeper.stop(envelope.execution_id)
            with contextlib.suppress(Exception):
                await self._let_go(dispatch)
            raise
        except BaseException:
            # Cut short (the worker abandons it at exit): its step did not finish, so its
            # attempt stays open and counts like a crash; the lease need not wait for its TTL.
            await keeper.stop(envelope.execution_id)
            with contextlib.suppress(Exception):
                await self._leases.release(lease)
            raise
        await keeper.stop(envelope.execution_id)
        try:
            await self._let_go(dispatch)
        except Exception as exc:
            # The lease may still be ours until its TTL: a follow-up carrier enqueued now could
            # meet it and be acked without effect, so nothing follows and nothing is acked.
            log.warning(
                "event=lease.release_failed execution_id=%s generation=%s outcome=%s error=%r: "
                "the carrier stays pending and is redelivered once the lease expired",
                envelope.execution_id,
                lease.generation,
                result.outcome,
                exc,
            )
            return DispatchResult(Disposition.LEAVE_PENDING, "release_failed", repr(exc))
        # W8: copies and hand-overs go out only once the lease is released, so they can never
        # meet their own holder's lease; a crash before this leaves the original pending.
        for copy, due_ms in result.schedule:
            await self._delay.schedule(copy, due_ms=due_ms)
        for carrier in result.enqueue:
            await self._queue.enqueue(carrier)
        return result

    async def _let_go(self, dispatch: Dispatch) -> None:
        """End the dispatch's attempt (W2), then give its lease up (W3)."""
        lease = dispatch.lease
        if dispatch.attempt_begun:
            await self._counters.end_attempt(lease.execution_id, lease.generation)
        await self._leases.release(lease)

    # --- start and resume (W6, W7) -------------------------------------------------------

    async def _dispatch(self, dispatch: Dispatch, flags: ControlFlags) -> DispatchResult:
        envelope = dispatch.envelope
        state = await self._executions.load(envelope.execution_id)
        new_flow = None
        if envelope.kind is CarrierKind.START and state is None:
            try:
                new_flow = await self._flows.get(envelope.flow_id, envelope.version)
            except UnknownFlowError as exc:
                return DispatchResult(Disposition.DEAD_LETTER, "unknown_flow", str(exc))
        # The node this attempt runs first: the checkpoint's, or a new execution's start node.
        if new_flow is not None:
            first_node: str | None = new_flow.start_node.id
        else:
            first_node = None if state is None else state.next_node_id
        exhausted = await self._begin_attempt(dispatch, state, first_node)
        if exhausted is not None:
            return exhausted
        if envelope.kind is CarrierKind.START:
            stored = None if state is None else StoredExecution(state.flow_id, state.status)
            request = StartRequest(envelope.execution_id, envelope.flow_id, envelope.dedup_key)
            start = decide_start(request, stored)
            if start.kind is StartKind.ID_CONFLICT:
                return DispatchResult(Disposition.DEAD_LETTER, start.kind.value, start.detail)
            if start.kind is StartKind.CLAIM_DEDUP_KEY:
                deduplicated = await self._claim_dedup_key(request, envelope.tenant_id)
                if deduplicated is not None:
                    return deduplicated
            if state is None:
                assert new_flow is not None
                return await self._start(dispatch, new_flow)
            # W6: a redelivered start continues from the checkpoint, never from the first node.
            return await self._resume(dispatch, state, ResumeType.CONTINUE, flags)
        if state is None:
            return DispatchResult(
                Disposition.DEAD_LETTER,
                "unknown_execution",
                f"resume for execution {envelope.execution_id} which does not exist",
            )
        assert envelope.resume_type is not None
        return await self._resume(dispatch, state, envelope.resume_type, flags)

    async def _begin_attempt(
        self, dispatch: Dispatch, state: ExecutionState | None, node_id: str | None
    ) -> DispatchResult | None:
        """Record this attempt and count an earlier one that never returned (W2).

        A dispatch whose worker died (or that lost its lease) leaves its attempt open; it is
        counted against ``node_id``, the checkpoint's next node (a new execution's start
        node), the only one it can have been running.
        Redis's delivery count is not used: a redelivery skipped while a lease was live costs
        nothing. Once ``max_deliveries`` attempts crashed the carrier is given up: the
        dead-letter guard makes the execution terminal, then files one DLQ entry.
        """
        lease = dispatch.lease
        counters = await self._counters.begin_attempt(
            lease.execution_id, lease.generation, ttl_ms=COUNTER_TTL_MS
        )
        dispatch.attempt_begun = True
        crash = decide_crashed_attempts(
            node_id=node_id,
            node_crashes=counters.node_crashes.get(node_id or "", 0),
            previous_unfinished=counters.open_attempt is not None,
            max_deliveries=self._settings.max_deliveries,
        )
        if crash.counter_changes:
            log.warning(
                "event=attempt.crashed execution_id=%s node_id=%s crashes=%d max_deliveries=%d: "
                "an earlier dispatch began under lease generation %s and never returned (its "
                "worker died or lost the lease)",
                lease.execution_id,
                node_id,
                crash.crashes,
                self._settings.max_deliveries,
                counters.open_attempt,
            )
            counters = await self._counters.apply(
                lease.execution_id, crash.counter_changes, ttl_ms=COUNTER_TTL_MS
            )
        dispatch.counters = counters
        if not crash.budget_spent or (state is not None and state.is_terminal):
            return None
        return DispatchResult(
            Disposition.DEAD_LETTER,
            "attempts_exhausted",
            f"{crash.crashes} attempts at node {node_id!r} crashed their worker "
            f"(--max-deliveries {self._settings.max_deliveries})",
            refused=False,
        )

    async def _claim_dedup_key(
        self, request: StartRequest, tenant_id: str
    ) -> DispatchResult | None:
        """W6 at the worker: start only while the key names this execution (or nobody).

        The key was claimed when the start was accepted; it can name another execution now
        only if this claim was released as an orphan and claimed again by a later start of
        the same request — that one runs, this one does not.
        """
        if self._claims is None:
            return None
        claimed = await self._claims.claim(request, tenant_id=tenant_id)
        decision = claimed.decision
        if decision.kind is StartKind.NEW_START:
            return None
        log.info(
            "event=start.deduplicated execution_id=%s dedup_key=%r holder=%s decision=%s: %s; "
            "this start is not run",
            request.execution_id,
            request.dedup_key,
            decision.execution_id,
            decision.kind.value,
            decision.detail,
        )
        follow_ups: tuple[TaskEnvelope, ...] = ()
        if decision.kind is StartKind.ENQUEUE_CONTINUE:
            follow_ups = (
                TaskEnvelope.resume(
                    execution_id=decision.execution_id,
                    flow_id=claimed.holder_flow_id or request.flow_id,
                    resume_type=ResumeType.CONTINUE,
                    now_ms=self._clock.now_ms(),
                    tenant_id=tenant_id,
                    generations=self._settings.generations,
                ),
            )
        return DispatchResult(Disposition.ACK, "deduplicated", decision.detail, enqueue=follow_ups)

    async def _start(self, dispatch: Dispatch, flow: Flow) -> DispatchResult:
        envelope = dispatch.envelope
        state = ExecutionState.new(
            execution_id=envelope.execution_id,
            flow_id=flow.flow_id,
            flow_version=flow.version,
            fingerprint=flow.fingerprint,
            start_node_id=flow.start_node.id,
            input=envelope.params,
            now_ms=self._clock.now_ms(),
            tenant_id=envelope.tenant_id,
        )
        state = attrs.evolve(
            state,
            subgraph_fingerprint=flow.subgraph_fingerprint(flow.start_node.id),
            dedup_key=envelope.dedup_key,
        )
        return await self._advance(dispatch, state, flow, resume=None, stored=None)

    async def _resume(
        self, dispatch: Dispatch, state: ExecutionState, kind: ResumeType, flags: ControlFlags
    ) -> DispatchResult:
        envelope = dispatch.envelope
        try:
            flow = await self._flows.get(state.flow_id, state.flow_version)
        except UnknownFlowError as exc:
            return await self._fail(dispatch, state, exc, previous=state)
        view = ExecutionView.of(
            state,
            subgraph_fingerprint=state.subgraph_fingerprint,
            g1_wakeups=dispatch.counters.wakeups,
            consecutive_failures=dispatch.counters.no_fail,
            cancel_requested=flags.cancel_requested,
        )
        current = CurrentDefinition(
            flow.fingerprint,
            flow.subgraph_fingerprint(view.node_id)
            if view.node_id and flow.has_node(view.node_id)
            else None,
        )
        request = ResumeRequest(
            kind, subscription_id=envelope.subscription_id, event_id=_event_id(envelope)
        )
        decision = decide_resume(view, request, current)
        if decision.log_warning:
            log.warning("%s", decision.log_warning)
        return await self._perform(dispatch, state, flow, decision)

    async def _perform(
        self, dispatch: Dispatch, state: ExecutionState, flow: Flow, decision: ResumeDecision
    ) -> DispatchResult:
        kind, envelope, stored = decision.kind, dispatch.envelope, state
        if decision.ack:
            if decision.kind in (ResumeKind.PROTOCOL_ERROR, ResumeKind.REFUSE):
                log.warning("event=resume.%s %s", decision.reason.value, decision.detail)
            return _ack(decision.reason.value, decision.detail)
        if kind is ResumeKind.CANCEL:
            return await self._cancel(dispatch, state)
        if kind is ResumeKind.DEFINITION_DRIFT:
            drift = decision.error or FlowDefinitionError(decision.detail)
            return await self._fail(dispatch, state, drift, previous=state)
        if kind is ResumeKind.WAKE_UP:
            wake = decide_wakeup(
                wakeups=dispatch.counters.wakeups, no_fail_streak=dispatch.counters.no_fail
            )
            dispatch.counters = await self._counters.apply(
                state.execution_id, wake.counter_changes, ttl_ms=COUNTER_TTL_MS
            )
            failed_at = state.error.node_id if state.error and state.error.node_id else None
            state = state.transition(
                ExecutionStatus.RUNNING,
                now_ms=self._clock.now_ms(),
                error=None,
                next_node_id=failed_at or state.next_node_id or flow.start_node.id,
            )
            return await self._advance(dispatch, state, flow, resume=None, stored=stored)
        resume = None
        if kind is ResumeKind.PROCEED and state.status is ExecutionStatus.SUSPENDED:
            assert envelope.resume_type is not None
            if envelope.resume_type is ResumeType.EVENT and envelope.subscription_id is not None:
                taken_by = await self._waits.take_for_resume(
                    state.execution_id, state.tenant_id, envelope.event, envelope.subscription_id
                )
                if taken_by is not None:
                    # V6: an earlier wait of this execution already took this event.
                    return _ack(
                        "event_already_taken",
                        f"event {_event_id(envelope)} was taken by subscription {taken_by}",
                    )
            resume = ResumeInput(envelope.resume_type, envelope.event, envelope.subscription_id)
        return await self._advance(dispatch, state, flow, resume=resume, stored=state)

    async def _cancel(self, dispatch: Dispatch, state: ExecutionState) -> DispatchResult:
        cancelled = state.transition(
            ExecutionStatus.CANCELLED,
            now_ms=self._clock.now_ms(),
            error=ExecutionError(CODE_CANCELLED, "cancelled by request", state.next_node_id),
        )
        await self._checkpoint(dispatch, cancelled, previous=state)
        await self._drop_subscription(state.suspension)
        return _ack("cancelled")

    async def _fail(
        self,
        dispatch: Dispatch,
        state: ExecutionState,
        error: Exception,
        *,
        previous: ExecutionState | None,
    ) -> DispatchResult:
        failed = state.transition(
            ExecutionStatus.ERROR,
            now_ms=self._clock.now_ms(),
            error=ExecutionError(-500, str(error), state.next_node_id, type(error).__name__),
        )
        await self._checkpoint(dispatch, failed, previous=previous)
        CallbackManager(self._listeners()).on_flow_end(state.execution_id, None, error)
        return _ack("failed", str(error))

    # --- the step loop (W1, W8) ----------------------------------------------------------

    async def _advance(
        self,
        dispatch: Dispatch,
        state: ExecutionState,
        flow: Flow,
        *,
        resume: ResumeInput | None,
        stored: ExecutionState | None,
    ) -> DispatchResult:
        try:
            self._flows.validate(flow)
        except FlowDefinitionError as exc:
            return await self._fail(dispatch, state, exc, previous=stored)
        context = ExecutionContext.from_state(state)
        context.cancel_event = dispatch.lost
        context.attempts = dispatch.counters.attempts()  # E15: ctx.attempt across deliveries
        execution = FlowExecution(
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
        consumed_subscription = resume.subscription_id if resume is not None else None
        # What storage holds now: each checkpoint writes only what changed since (S3).
        previous = stored
        for _ in range(self._settings.max_steps_per_dispatch):
            node_id = state.next_node_id
            assert node_id is not None, "a non-terminal execution always has a next node"
            dispatch.open_node, dispatch.steps = node_id, state.steps
            started_ms = self._clock.now_ms()
            try:
                output = await execution.arun_distributed(
                    node_id=node_id, resume=resume, registrar=self._waits.for_dispatch(dispatch)
                )
                if dispatch.ready_event is not None:
                    # V6: the wait found its event in the inbox; it resumes in this very step.
                    subscription_id, event = dispatch.ready_event
                    dispatch.ready_event = None
                    consumed_subscription = subscription_id
                    output = await execution.arun_distributed(
                        node_id=node_id,
                        resume=ResumeInput(ResumeType.EVENT, event.to_json(), subscription_id),
                        registrar=self._waits.for_dispatch(dispatch),
                    )
            except FlowErrorException as exc:
                dispatch.open_node = None  # closed before the failure is handled, not after
                failed_at = context.apply_to(state)
                return await self._node_failed(dispatch, failed_at, flow, exc, previous)
            finally:
                dispatch.open_node = None
            resume = None
            state = self._apply(state, context, output, flow, started_ms)
            await self._checkpoint(dispatch, state, previous=previous)
            previous = state
            await self._on_success(dispatch, output.node_id)
            if consumed_subscription is not None:
                await self._subscriptions.remove(consumed_subscription)
                consumed_subscription = None
            if state.status is ExecutionStatus.SUSPENDED:
                return _ack("suspended")
            if state.status is ExecutionStatus.COMPLETED:
                return _ack("completed")
        # Hand over to a fresh carrier (enqueued once the lease is released) before acking this
        # one: the execution is never carrier-less.
        hand_over = TaskEnvelope.resume(
            execution_id=state.execution_id,
            flow_id=state.flow_id,
            resume_type=ResumeType.CONTINUE,
            now_ms=self._clock.now_ms(),
            tenant_id=state.tenant_id,
            generations=self._settings.generations,
        )
        return DispatchResult(Disposition.ACK, "yielded", enqueue=(hand_over,))

    async def _node_failed(
        self,
        dispatch: Dispatch,
        state: ExecutionState,
        flow: Flow,
        error: FlowErrorException,
        previous: ExecutionState | None,
    ) -> DispatchResult:
        failed_node = failed_node_of(error) or state.next_node_id
        counters = dispatch.counters
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
        if decision.counter_changes and not dispatch.lost.is_set():
            # Counted before the checkpoint: a crash in between over-counts, never under-counts.
            dispatch.counters = await self._counters.apply(
                state.execution_id, decision.counter_changes, ttl_ms=COUNTER_TTL_MS
            )
        if decision.retries:
            # Persist where it failed, then (after the lease is released) the delayed copy.
            await self._checkpoint(dispatch, state, previous=previous)
            copy = copy_envelope(
                dispatch.envelope,
                kind=CarrierKind.RESUME,
                resume_type=ResumeType.CONTINUE,
                event=None,
                subscription_id=None,
                dedup_key=None,
            )
            due = self._clock.now_ms() + (decision.delay_ms or 0)
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
                Disposition.ACK, "retry_scheduled", str(error), schedule=((copy, due),)
            )
        failed = state.transition(
            ExecutionStatus.ERROR,
            now_ms=self._clock.now_ms(),
            error=_error_of(error, decision.node_retries),
        )
        await self._checkpoint(dispatch, failed, previous=previous)
        if FailureAction.DEAD_LETTER in decision.actions:
            reason = decision.terminal_reason.value if decision.terminal_reason else "failed"
            return DispatchResult(Disposition.DEAD_LETTER, reason, str(error))
        return _ack("failed", str(error))

    async def _on_success(self, dispatch: Dispatch, node_id: str) -> None:
        counters = dispatch.counters
        # Skipped when there is nothing to clear: a steady-state step stays within P2.
        if (
            counters.node_retries.get(node_id)
            or counters.node_crashes.get(node_id)
            or counters.no_fail
        ):
            dispatch.counters = await self._counters.apply(
                dispatch.envelope.execution_id, on_node_success(node_id), ttl_ms=COUNTER_TTL_MS
            )

    def _apply(
        self,
        state: ExecutionState,
        context: ExecutionContext,
        output: StepOutput,
        flow: Flow,
        started_ms: int,
    ) -> ExecutionState:
        now = self._clock.now_ms()
        timings = dict(state.node_timings)
        timings[output.node_id] = node_timing(
            state.node_timings.get(output.node_id),
            started_ms=started_ms,
            now_ms=now,
            resumed=state.status is ExecutionStatus.SUSPENDED,
            suspended=output.suspension is not None,
        )
        state = attrs.evolve(context.apply_to(state), steps=state.steps + 1, node_timings=timings)
        if output.suspension is not None:
            return state.transition(
                ExecutionStatus.SUSPENDED,
                now_ms=now,
                suspension=output.suspension,
                next_node_id=output.node_id,
                subgraph_fingerprint=flow.subgraph_fingerprint(output.node_id),
            )
        if output.is_end:
            return state.transition(
                ExecutionStatus.COMPLETED, now_ms=now, result=output.result, next_node_id=None
            )
        assert output.next_node_id is not None
        return state.transition(
            ExecutionStatus.RUNNING,
            now_ms=now,
            next_node_id=output.next_node_id,
            subgraph_fingerprint=flow.subgraph_fingerprint(output.next_node_id),
        )

    async def _checkpoint(
        self, dispatch: Dispatch, state: ExecutionState, *, previous: ExecutionState | None
    ) -> None:
        if dispatch.lost.is_set():
            raise LeaseLostError(
                f"execution {state.execution_id}: the lease (generation "
                f"{dispatch.lease.generation}) was not renewed in time; this worker stops "
                "advancing it and leaves the carrier for whoever holds the lease next"
            )
        async with dispatch.writes:  # W15: heartbeats and checkpoints never interleave
            await self._executions.save(state, fence=dispatch.lease.generation, previous=previous)

    async def _drop_subscription(self, suspension: Suspension | None) -> None:
        if suspension is not None and suspension.subscription_id is not None:
            await self._subscriptions.remove(suspension.subscription_id)


def _event_id(envelope: TaskEnvelope) -> str | None:
    event = envelope.event
    return None if event is None else event.get("event_id")


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
