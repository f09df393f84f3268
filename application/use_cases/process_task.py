"""The worker step: take one carrier, advance its execution under the lease, checkpoint (W1-W7).

The caller acks only when this returns ``Disposition.ACK``; every path that could leave an
execution without a carrier returns ``LEAVE_PENDING`` instead (invariant I0, W5).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
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
    event_subscription,
    wait_timeout_ms,
)
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import (
    Clock,
    ExecutionRepository,
    IdGenerator,
    LeaseManager,
    SubscriptionStore,
    TaskQueue,
)
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.envelope import CarrierKind, ResumeType, TaskEnvelope
from plaita.domain.errors import (
    ExecutionIdConflictError,
    ExecutionLeaseError,
    FlowDefinitionError,
    LeaseLostError,
    SuspensionRegistrationError,
    UnknownFlowError,
)
from plaita.domain.execution import ExecutionError, ExecutionState, ExecutionStatus, Suspension
from plaita.domain.failures import CODE_CANCELLED, FlowErrorException
from plaita.domain.flow import EventNode, Flow, SleepNode
from plaita.domain.lease import Lease, renewal_interval_seconds

JSON = Any
log = logging.getLogger("plaita.worker.step")


class Disposition(enum.Enum):
    ACK = "ack"
    LEAVE_PENDING = "leave_pending"
    DEAD_LETTER = "dead_letter"


@attrs.frozen
class DispatchResult:
    disposition: Disposition
    outcome: str
    detail: str = ""


def _ack(outcome: str, detail: str = "") -> DispatchResult:
    return DispatchResult(Disposition.ACK, outcome, detail)


@attrs.frozen
class StepSettings:
    holder_id: str
    lease_ttl_ms: int = 120_000
    default_deadline_ms: int = 1_800_000
    #: A dispatch that ran this many nodes hands over to a fresh carrier (loops stay fair).
    max_steps_per_dispatch: int = 1000


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
        self._listeners = listeners
        self._sleep = sleep

    async def __call__(self, envelope: TaskEnvelope) -> DispatchResult:
        lease = await self._leases.acquire(
            envelope.execution_id, self._settings.holder_id, ttl_ms=self._settings.lease_ttl_ms
        )
        if lease is None:
            holder = await self._leases.holder(envelope.execution_id)
            return DispatchResult(
                Disposition.LEAVE_PENDING,
                "lease_conflict",
                f"held by {holder.holder_id if holder else 'nobody (expired just now)'}",
            )
        # Set when the lease is lost: the running handler sees ctx.cancelled, and no further
        # checkpoint is written by this holder (it fences itself off).
        lost = threading.Event()
        watchdog = asyncio.create_task(self._keep_lease(lease, lost))
        try:
            return await self._dispatch(envelope, lease, lost)
        except ExecutionLeaseError as exc:
            # W4: a fenced-off writer must not ack; the new holder owns the carrier's fate.
            outcome = "lease_lost" if isinstance(exc, LeaseLostError) else "fenced"
            return DispatchResult(Disposition.LEAVE_PENDING, outcome, str(exc))
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
            await self._leases.release(lease)

    async def _keep_lease(self, lease: Lease, lost: threading.Event) -> None:
        ttl_seconds = self._settings.lease_ttl_ms / 1000
        interval = renewal_interval_seconds(ttl_seconds)
        last_renewed = self._clock.monotonic()
        while True:
            await self._sleep(interval)
            try:
                renewed = await self._leases.renew(lease, ttl_ms=self._settings.lease_ttl_ms)
            except Exception as exc:  # a store outage: retry until the TTL says otherwise
                log.warning(
                    "event=lease.renew_failed execution_id=%s error=%r: retrying; the step "
                    "stops writing if no renewal succeeds within the lease TTL",
                    lease.execution_id,
                    exc,
                )
                if self._clock.monotonic() - last_renewed < ttl_seconds:
                    continue
                renewed = False
            if renewed:
                last_renewed = self._clock.monotonic()
                continue
            log.warning(
                "event=lease.lost execution_id=%s generation=%s: the lease expired or another "
                "worker took over; this worker stops advancing the execution",
                lease.execution_id,
                lease.generation,
            )
            lost.set()
            return

    async def _dispatch(
        self, envelope: TaskEnvelope, lease: Lease, lost: threading.Event
    ) -> DispatchResult:
        state = await self._executions.load(envelope.execution_id)
        if envelope.kind is CarrierKind.START:
            return await self._start(envelope, state, lease, lost)
        if state is None:
            return DispatchResult(
                Disposition.DEAD_LETTER,
                "unknown_execution",
                f"resume for execution {envelope.execution_id} which does not exist",
            )
        return await self._resume(envelope, state, lease, lost)

    async def _start(
        self,
        envelope: TaskEnvelope,
        state: ExecutionState | None,
        lease: Lease,
        lost: threading.Event,
    ) -> DispatchResult:
        if state is not None:
            if state.flow_id != envelope.flow_id:
                conflict = ExecutionIdConflictError(
                    f"execution {state.execution_id} belongs to flow {state.flow_id!r}; a start "
                    f"for flow {envelope.flow_id!r} cannot reuse its id"
                )
                return DispatchResult(
                    Disposition.DEAD_LETTER, "execution_id_conflict", str(conflict)
                )
            if state.is_terminal:
                return _ack("already_" + state.status.value)
            if state.status is ExecutionStatus.SUSPENDED:
                return _ack("already_suspended")
            # W6: a redelivered start continues from the checkpoint, never from the first node.
            return await self._advance(state, lease, lost, resume=None)
        try:
            flow = await self._flows.get(envelope.flow_id, envelope.version)
        except UnknownFlowError as exc:
            return DispatchResult(Disposition.DEAD_LETTER, "unknown_flow", str(exc))
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
        return await self._advance(state, lease, lost, resume=None, flow=flow)

    async def _resume(
        self, envelope: TaskEnvelope, state: ExecutionState, lease: Lease, lost: threading.Event
    ) -> DispatchResult:
        kind = envelope.resume_type
        assert kind is not None
        if state.is_terminal:
            return _ack("already_" + state.status.value)
        if kind is ResumeType.CANCEL:
            return await self._cancel(state, lease, lost)
        if state.status is ExecutionStatus.SUSPENDED:
            if kind in (ResumeType.CONTINUE, ResumeType.RETRY):
                return _ack("already_suspended")
            suspension = state.suspension
            if suspension is None or (
                kind is ResumeType.EVENT and suspension.subscription_id != envelope.subscription_id
            ):
                log.warning(
                    "event=resume.stale execution_id=%s subscription_id=%s: the execution waits "
                    "elsewhere now; the carrier is recorded and ignored",
                    state.execution_id,
                    envelope.subscription_id,
                )
                return _ack("stale_resume")
            resume = ResumeInput(kind, envelope.event, envelope.subscription_id)
            return await self._advance(state, lease, lost, resume=resume)
        # Running: an event/timeout for a wait the flow already left means "continue" (W7).
        return await self._advance(state, lease, lost, resume=None)

    async def _cancel(
        self, state: ExecutionState, lease: Lease, lost: threading.Event
    ) -> DispatchResult:
        cancelled = state.transition(
            ExecutionStatus.CANCELLED,
            now_ms=self._clock.now_ms(),
            error=ExecutionError(CODE_CANCELLED, "cancelled by request", state.next_node_id),
        )
        await self._checkpoint(cancelled, lease, lost)
        await self._drop_subscription(state.suspension)
        return _ack("cancelled")

    async def _advance(
        self,
        state: ExecutionState,
        lease: Lease,
        lost: threading.Event,
        *,
        resume: ResumeInput | None,
        flow: Flow | None = None,
    ) -> DispatchResult:
        callbacks = CallbackManager(self._listeners())
        try:
            flow = flow or await self._flows.get(state.flow_id, state.flow_version)
            self._flows.validate(flow)
        except (UnknownFlowError, FlowDefinitionError) as exc:
            failed = state.transition(
                ExecutionStatus.ERROR,
                now_ms=self._clock.now_ms(),
                error=ExecutionError(-500, str(exc), state.next_node_id, type(exc).__name__),
            )
            await self._checkpoint(failed, lease, lost)
            callbacks.on_flow_end(state.execution_id, None, exc)
            return _ack("failed", str(exc))
        context = ExecutionContext.from_state(state)
        context.cancel_event = lost
        execution = FlowExecution(
            flow,
            context,
            handlers=self._handlers,
            clock=self._clock,
            new_id=self._ids.new_id,
            options=RunOptions(
                mode="distributed", default_deadline_ms=self._settings.default_deadline_ms
            ),
            callbacks=callbacks,
        )
        consumed_subscription = resume.subscription_id if resume is not None else None
        for _ in range(self._settings.max_steps_per_dispatch):
            node_id = state.next_node_id
            assert node_id is not None, "a non-terminal execution always has a next node"
            try:
                output = await execution.arun_distributed(
                    node_id=node_id, resume=resume, registrar=self
                )
            except FlowErrorException as exc:
                failed = context.apply_to(state).transition(
                    ExecutionStatus.ERROR,
                    now_ms=self._clock.now_ms(),
                    error=_error_of(exc),
                )
                await self._checkpoint(failed, lease, lost)
                return _ack("failed", str(exc))
            resume = None
            state = self._apply(state, context, output)
            await self._checkpoint(state, lease, lost)
            if consumed_subscription is not None:
                await self._subscriptions.remove(consumed_subscription)
                consumed_subscription = None
            if state.status is ExecutionStatus.SUSPENDED:
                return _ack("suspended")
            if state.status is ExecutionStatus.COMPLETED:
                return _ack("completed")
        # Hand over to a fresh carrier before acking this one: the execution is never carrier-less.
        await self._queue.enqueue(
            TaskEnvelope.resume(
                execution_id=state.execution_id,
                flow_id=state.flow_id,
                resume_type=ResumeType.CONTINUE,
                now_ms=self._clock.now_ms(),
                tenant_id=state.tenant_id,
            )
        )
        return _ack("yielded")

    def _apply(
        self, state: ExecutionState, context: ExecutionContext, output: StepOutput
    ) -> ExecutionState:
        now = self._clock.now_ms()
        state = attrs.evolve(context.apply_to(state), steps=state.steps + 1)
        if output.suspension is not None:
            return state.transition(
                ExecutionStatus.SUSPENDED,
                now_ms=now,
                suspension=output.suspension,
                next_node_id=output.node_id,
            )
        if output.is_end:
            return state.transition(
                ExecutionStatus.COMPLETED, now_ms=now, result=output.result, next_node_id=None
            )
        return state.transition(
            ExecutionStatus.RUNNING, now_ms=now, next_node_id=output.next_node_id
        )

    async def _checkpoint(self, state: ExecutionState, lease: Lease, lost: threading.Event) -> None:
        if lost.is_set():
            raise LeaseLostError(
                f"execution {state.execution_id}: the lease (generation {lease.generation}) was "
                "not renewed in time; this worker stops advancing it and leaves the carrier "
                "for whoever holds the lease next"
            )
        await self._executions.save(state, fence=lease.generation)

    async def _drop_subscription(self, suspension: Suspension | None) -> None:
        if suspension is not None and suspension.subscription_id is not None:
            await self._subscriptions.remove(suspension.subscription_id)

    async def register_event_wait(self, node: EventNode, context: ExecutionContext) -> Suspension:
        if wait_timeout_ms(node) is not None:
            raise SuspensionRegistrationError(
                f"event node {node.id!r} has a timeout, which needs the delay queue; this worker "
                "has none wired, so the step fails rather than wait without a way to time out"
            )
        subscription = event_subscription(node, context, self._ids.new_id(), self._clock.now_ms())
        await self._subscriptions.add(subscription)
        return Suspension(node_id=node.id, subscription_id=subscription.subscription_id)

    async def register_timer(self, node: SleepNode, context: ExecutionContext) -> Suspension:
        raise SuspensionRegistrationError(
            f"sleep node {node.id!r} needs the delay queue; this worker has none wired"
        )


def _error_of(exc: FlowErrorException) -> ExecutionError:
    cause = exc.__cause__
    code = getattr(cause, "code", exc.code)
    return ExecutionError(
        code=code if isinstance(code, int) else exc.code,
        message=str(cause) if cause is not None else exc.message,
        node_id=exc.node_id,
        kind=type(cause).__name__ if cause is not None else type(exc).__name__,
    )
