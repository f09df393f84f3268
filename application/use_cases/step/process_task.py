"""The worker step: one carrier, from the gates to the ack (W1-W15). Read it top to bottom.

gates → lease and load → slots (E1a) → decide (start or resume) → advance loop (engine step
→ apply → checkpoint) → release → schedule → let the slots go → settle. Every rule is the
domain's: the stages gather the facts, ask the pure decision functions and perform the
answer through ports; what passes between them is a value (a ``Carrier``, the ``Held``
lease, ``Counters``, a ``DispatchResult``). The caller acks only on ``Disposition.ACK``;
every path that could leave an execution without a carrier answers ``LEAVE_PENDING``
instead (invariant I0, W5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import attrs

from plaita.application.engine.children import NO_CHILD_EXECUTIONS, ChildExecutions
from plaita.application.engine.runner import NO_HTTP_CLIENT
from plaita.application.handlers import HandlerRegistry
from plaita.application.null_objects import NO_TRACING
from plaita.application.ports import (
    Clock,
    CounterStore,
    DedupStore,
    DelayQueue,
    ExecutionControls,
    ExecutionRepository,
    HttpClient,
    IdGenerator,
    Inbox,
    LeasedLoad,
    LeaseManager,
    RateBuckets,
    SlotTables,
    SubscriptionStore,
    TaskQueue,
    TenantDirectory,
    Tracer,
    WaitingNotes,
    WorkerRegistry,
)
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.executions import append_history_best_effort
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.step.advance import Advance, Held
from plaita.application.use_cases.step.attempts import Attempts
from plaita.application.use_cases.step.dispatch import (
    Carrier,
    DispatchResult,
    Disposition,
    StepSettings,
)
from plaita.application.use_cases.step.gates import CarrierGates
from plaita.application.use_cases.step.lease_keeper import KeeperRun, LeaseKeeper
from plaita.application.use_cases.step.rate_gate import RateLimits
from plaita.application.use_cases.step.resumes import Resumes
from plaita.application.use_cases.step.slots import SlotGate
from plaita.application.use_cases.step.starts import Starts
from plaita.application.use_cases.step.tenant_gate import TenantGate
from plaita.application.use_cases.step.tracing import StepTracing
from plaita.application.use_cases.step.waits import WaitRegistrar
from plaita.application.use_cases.step.writes import Writes
from plaita.domain import history
from plaita.domain.children import repeats_end_notice
from plaita.domain.envelope import CarrierKind, TaskEnvelope
from plaita.domain.errors import (
    ConcurrencyKeyError,
    ExecutionLeaseError,
    LeaseLostError,
    UnknownFlowError,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.lease import Lease
from plaita.domain.operator_controls import ControlFlags
from plaita.domain.step import first_state

log = logging.getLogger("plaita.worker.step")


class ProcessTask:
    def __init__(
        self,
        *,
        executions: ExecutionRepository,
        leases: LeaseManager,
        leased_load: LeasedLoad,
        flows: FlowCatalog,
        queue: TaskQueue,
        subscriptions: SubscriptionStore,
        handlers: HandlerRegistry,
        clock: Clock,
        ids: IdGenerator,
        settings: StepSettings,
        counters: CounterStore,
        delay: DelayQueue,
        registry: WorkerRegistry,
        dedup: DedupStore,
        inbox: Inbox,
        controls: ExecutionControls,
        slots: SlotTables,
        waiting: WaitingNotes,
        tenants: TenantDirectory,
        rate_buckets: RateBuckets,
        listeners: Callable[[], list[object]] = list,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        tracer: Tracer = NO_TRACING,
        http: HttpClient = NO_HTTP_CLIENT,
        children: ChildExecutions = NO_CHILD_EXECUTIONS,
    ) -> None:
        """``children`` starts and reads the child executions of subflow and map nodes
        (E13, E14); without it those nodes fail with a named error. ``leased_load`` takes
        the lease and reads the checkpoint after it (one script on Redis,
        ``SequentialLeasedLoad`` elsewhere)."""
        self._executions, self._leases, self._flows = executions, leases, flows
        self._leased_load = leased_load
        self._queue, self._delay, self._subscriptions = queue, delay, subscriptions
        self._clock, self._settings, self._listeners = clock, settings, listeners
        self._children = children
        #: Why an execution waits for room to run: written by the flow-control stages.
        self._waiting = waiting
        self._tenant_gate = TenantGate(
            directory=tenants,
            queue=queue,
            waiting=waiting,
            clock=clock,
            deployment_epoch=settings.deployment_epoch,
        )
        self._gates = CarrierGates(
            clock=clock,
            settings=settings,
            leases=leases,
            executions=executions,
            registry=registry,
            dedup=dedup,
            controls=controls,
            queue=queue,
        )
        self._slots = SlotGate(
            slots=slots, waiting=waiting, clock=clock, hold_ms=settings.lease_ttl_ms
        )
        self._keeper = LeaseKeeper(
            slots=self._slots,
            leases=leases,
            executions=executions,
            queue=queue,
            clock=clock,
            holder_id=settings.holder_id,
            lease_ttl_ms=settings.lease_ttl_ms,
            sleep=sleep,
        )
        self._attempts = Attempts(
            counters=counters,
            max_deliveries=settings.max_deliveries,
            executions=executions,
            clock=clock,
        )
        waits = WaitRegistrar(
            subscriptions=subscriptions,
            delay=delay,
            clock=clock,
            ids=ids,
            generations=settings.generations,
            inbox=inbox,
        )
        advance = Advance(
            flows=flows,
            handlers=handlers,
            counters=counters,
            subscriptions=subscriptions,
            waits=waits,
            clock=clock,
            ids=ids,
            settings=settings,
            listeners=listeners,
            tracing=StepTracing(tracer, worker=settings.holder_id),
            rates=RateLimits(buckets=rate_buckets, notes=waiting, clock=clock),
            http=http,
            children=children,
        )
        self._resumes = Resumes(
            flows=flows, counters=counters, waits=waits, advance=advance, clock=clock
        )
        self._starts = Starts(
            claims=DedupClaims(dedup=dedup, executions=executions),
            advance=advance,
            resumes=self._resumes,
            clock=clock,
            settings=settings,
        )

    async def __call__(
        self,
        envelope: TaskEnvelope,
        *,
        message_id: str | None = None,
        reclaimed: bool = False,
        deliveries: int = 1,
    ) -> DispatchResult:
        """Advance the carrier's execution, inside the carrier's tenant (W24)."""
        with tenant_scope(envelope.tenant_id):
            return await self._step(Carrier(envelope, message_id, reclaimed, deliveries))

    async def _step(self, carrier: Carrier) -> DispatchResult:
        # Gates: another pool's carrier, a reclaimed one beside a live lease, too old, deleted,
        # for another worker, paused (W12, W2, W14, W13, W25, W23).
        # Tenant (W24): its record is read while these gates read theirs (one pipeline).
        ahead = self._tenant_gate.read_ahead(carrier)
        try:
            refused = await self._gates.before_lease(carrier)
        except BaseException:
            ahead.discard()
            raise
        if refused is not None:
            ahead.discard()
            return refused
        # A suspended tenant's carrier is parked, a status this worker may not judge holds
        # it; ``tenant.max_running`` is the tenant's quota.
        tenant = await self._tenant_gate.admit(carrier, ahead)
        if tenant.stopped is not None:
            return tenant.stopped
        admission = await self._gates.admit(carrier)
        if admission.parked is not None:
            return admission.parked
        # Lease (W3), and the checkpoint read under it: held by another, the W5 table says
        # whether this carrier may go.
        lease, state = await self._leased_load.acquire_and_load(
            carrier.execution_id, self._settings.holder_id, ttl_ms=self._settings.lease_ttl_ms
        )
        if lease is None:
            conflict = await self._gates.on_conflict(carrier)
            await self._schedule(conflict)  # a deferred child notice's copy, before the ack
            return conflict
        run = self._keeper.start(lease, carrier.message_id)
        held = Held(carrier.envelope, run, self._writes_of(run))
        try:
            result = await self._under_lease(
                held, state, admission.flags, carrier.reclaimed, quota=tenant.max_running
            )
        except ExecutionLeaseError as exc:
            # W4: a fenced-off writer must not ack; the new holder owns the carrier's fate.
            outcome = "lease_lost" if isinstance(exc, LeaseLostError) else "fenced"
            result = DispatchResult(Disposition.LEAVE_PENDING, outcome, str(exc))
            await self._note_lease_lost(lease, fenced=outcome == "fenced")
        except Exception:
            # Not a crash (the dispatch returned, with an error): its attempt is ended, and the
            # carrier stays pending for a redelivery that meets the checkpoint.
            await run.stop()
            with contextlib.suppress(Exception):
                await self._let_go(lease)
            raise
        except BaseException:
            # Cut short (the worker abandons it at exit): its step did not finish, so its
            # attempt stays open and counts like a crash; the lease need not wait for its TTL.
            await run.stop()
            with contextlib.suppress(Exception):
                await self._leases.release(lease)
            raise
        await run.stop()
        # Release (W3), then schedule and settle (W8).
        try:
            await self._let_go(lease)
        except Exception as exc:
            # The lease may still be ours until its TTL: a follow-up carrier enqueued now could
            # meet it and be acked without effect, so nothing follows and nothing is acked.
            log.warning(
                "event=lease.release_failed execution_id=%s generation=%s outcome=%s error=%r: "
                "the carrier stays pending and is redelivered once the lease expired",
                lease.execution_id,
                lease.generation,
                result.outcome,
                exc,
            )
            return DispatchResult(Disposition.LEAVE_PENDING, "release_failed", repr(exc))
        await self._schedule(result)
        await self._let_slots_go(run, result)
        return result

    async def _under_lease(
        self,
        held: Held,
        state: ExecutionState | None,
        flags: ControlFlags,
        reclaimed: bool,
        *,
        quota: int | None,
    ) -> DispatchResult:
        """Take the slots (the tenant's ``quota``, the flow's concurrency key), count the
        attempt, and start or resume the execution from ``state``, its checkpoint read under
        the lease (W2, W6, W7)."""
        envelope = held.envelope
        if repeats_end_notice(state, reclaimed=reclaimed):
            assert state is not None
            await self._children.notify_parent(state)  # E14: its first may have died with a worker
        flow = None
        if envelope.kind is CarrierKind.START and state is None:
            try:
                flow = await self._flows.get(envelope.flow_id, envelope.version)
            except UnknownFlowError as exc:
                return DispatchResult(Disposition.DEAD_LETTER, "unknown_flow", str(exc))
        # Slots (E1a): before the attempt is counted, so waiting for one burns none (W2).
        slots = await self._slots.take(
            envelope,
            held.run.lease,
            flow or await self._flow_of(state),
            state,
            message_id=held.run.message_id,
            quota=quota,
        )
        if slots.failed is not None:
            return await self._key_failed(held, state, flow, slots.failed)
        if slots.waited is not None:
            return attrs.evolve(slots.waited, enqueue=(*slots.waited.enqueue, *slots.promoted))
        held.run.holding(slots.held)
        result = await self._run(held, state, flow, flags)
        return attrs.evolve(result, enqueue=(*result.enqueue, *slots.promoted))

    async def _run(
        self,
        held: Held,
        state: ExecutionState | None,
        flow: Flow | None,
        flags: ControlFlags,
    ) -> DispatchResult:
        """Count the attempt, then start or resume; the slots are held by now."""
        envelope = held.envelope
        # The node this attempt runs first: a new execution's start node, or the checkpoint's.
        first_node = flow.start_node.id if flow else state.next_node_id if state else None
        counters = await self._attempts.begin(held.run.lease, state, first_node)
        if isinstance(counters, DispatchResult):
            return counters  # its attempts are spent: given up (W2)
        if envelope.kind is CarrierKind.START:
            return await self._starts.run(held, state, flow, counters, flags)
        if state is None:
            return DispatchResult(
                Disposition.DEAD_LETTER,
                "unknown_execution",
                f"resume for execution {envelope.execution_id} which does not exist",
            )
        assert envelope.resume_type is not None, "a resume carrier names its resume type"
        return await self._resumes.run(held, state, envelope.resume_type, counters, flags)

    async def _key_failed(
        self,
        held: Held,
        state: ExecutionState | None,
        flow: Flow | None,
        error: ConcurrencyKeyError,
    ) -> DispatchResult:
        """E1a: the concurrency key failed on the input, so no slot can be taken: the
        execution ends in error under the lease, naming the key (never runs unlimited)."""
        if state is not None:
            return await held.writes.fail(state, error, previous=state)
        assert flow is not None, "a start without a row has its flow looked up"
        now_ms = self._clock.now_ms()
        fresh = first_state(held.envelope, flow, now_ms=now_ms, status=ExecutionStatus.RUNNING)
        return await held.writes.fail(fresh, error, previous=None)

    async def _flow_of(self, state: ExecutionState | None) -> Flow | None:
        """The definition a checkpoint runs (cached), for its slots; None when it has none
        here any more (the resume then says so)."""
        if state is None:
            return None
        try:
            return await self._flows.get(state.flow_id, state.flow_version)
        except UnknownFlowError:
            return None

    async def _let_slots_go(self, run: KeeperRun, result: DispatchResult) -> None:
        """After the lease (W8): release or keep the slots, then enqueue whom a release
        promoted; a failure leaves them to the slot sweep (their reservation lapses)."""
        for promoted in await self._slots.let_go(run.slots, result):
            try:
                await self._queue.enqueue(promoted)
            except Exception as exc:
                log.warning(
                    "event=slots.promote_failed execution_id=%s error=%r: the promoted carrier "
                    "stays kept by its slot table; the slot sweep enqueues it again",
                    promoted.execution_id,
                    exc,
                )

    async def _note_lease_lost(self, lease: Lease, *, fenced: bool) -> None:
        """The history's one entry with no checkpoint to ride on (the lease is gone): a
        best-effort append without a fence, on this rare path only; a failure is logged."""
        entry = history.lease_lost(
            self._clock.now_ms(),
            fenced=fenced,
            node_id=None,
            worker=lease.holder_id,
            generation=lease.generation,
        )
        await append_history_best_effort(self._executions, lease.execution_id, entry)

    def _writes_of(self, run: KeeperRun) -> Writes:
        return Writes(
            executions=self._executions,
            subscriptions=self._subscriptions,
            clock=self._clock,
            run=run,
            listeners=self._listeners,
        )

    async def _let_go(self, lease: Lease) -> None:
        """End the dispatch's attempt (W2; a no-op if it never began), then give its lease up
        (W3)."""
        await self._attempts.end(lease)
        await self._leases.release(lease)

    async def _schedule(self, result: DispatchResult) -> None:
        # W8: copies and hand-overs go out only once the lease is released, so they can never
        # meet their own holder's lease; a crash before this leaves the original pending.
        for copy, due_ms in result.schedule:
            await self._delay.schedule(copy, due_ms=due_ms)
        for carrier in result.enqueue:
            await self._queue.enqueue(carrier)
