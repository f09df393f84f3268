"""The checks a carrier passes before and instead of the lease (W2, W5, W11-W14, W23, W25).

Before the lease, in order: its config generations (another pool's carrier is left pending,
W12), a reclaimed carrier whose execution's lease is live (left pending, uncounted: W2,
``decide_reclaimed``; a dead holder's lease is taken over, P6), its age (W14), the
execution's tombstone (W13), its target instance (passed on to another worker, or stripped:
W25, ``affinity``), then the operator's pause gate (a paused execution's carrier is parked,
W23). When the lease is held by someone
else: the W5 conflict table, with the holder's registry record. Every answer is the
domain's; this class gathers the facts.
"""

from __future__ import annotations

import logging

import attrs

from plaita.application.ports import (
    Clock,
    DedupStore,
    ExecutionControls,
    ExecutionRepository,
    LeaseManager,
    ParkedCarrier,
    TaskQueue,
    WorkerRegistry,
)
from plaita.application.use_cases.step.affinity import AffinityGate
from plaita.application.use_cases.step.dispatch import (
    Carrier,
    DispatchResult,
    Disposition,
    StepSettings,
    ack,
)
from plaita.domain.config_generations import decide_consume
from plaita.domain.dead_letter import LeaseLookup
from plaita.domain.envelope import CarrierKind, TaskEnvelope, copy_envelope
from plaita.domain.lease import Lease, stale_heartbeat_seconds
from plaita.domain.lease_conflict import (
    HolderStatus,
    conflict_carrier,
    decide_conflict,
    holder_status,
)
from plaita.domain.operator_controls import ControlFlags, carrier_parkable
from plaita.domain.reclaim import HolderLiveness, ReclaimAction, decide_reclaimed
from plaita.domain.tombstone import (
    DispatchPath,
    GateAction,
    check_carrier_age,
    copy_timestamp_ms,
    gate,
)

log = logging.getLogger("plaita.worker.step")

#: The outcome of a reclaimed carrier left pending while its execution's lease is live.
RECLAIM_SKIPPED = "reclaim_skipped"


@attrs.frozen
class Admission:
    """The pause gate's answer: the carrier parked (its result), or the operator's flags."""

    flags: ControlFlags
    parked: DispatchResult | None = None


class CarrierGates:
    def __init__(
        self,
        *,
        clock: Clock,
        settings: StepSettings,
        leases: LeaseManager,
        executions: ExecutionRepository,
        registry: WorkerRegistry,
        dedup: DedupStore,
        controls: ExecutionControls,
        queue: TaskQueue,
    ) -> None:
        self._clock = clock
        self._settings = settings
        self._leases = leases
        self._executions = executions
        self._registry = registry
        self._dedup = dedup
        self._controls = controls
        self._queue = queue
        self._affinity = AffinityGate(
            registry=registry, queue=queue, executions=executions, clock=clock, settings=settings
        )

    async def before_lease(self, carrier: Carrier) -> DispatchResult | None:
        """Why this carrier must not take the lease, or None."""
        envelope = carrier.envelope
        foreign = self._foreign(carrier)
        if foreign is not None:
            return foreign
        if carrier.reclaimed:
            skipped = await self._reclaim_skipped(carrier)
            if skipped is not None:
                return skipped
        age = check_carrier_age(
            now_ms=self._clock.now_ms(),
            payload_timestamp_ms=envelope.timestamp_ms,
            stream_id=carrier.message_id,
            max_age_ms=self._settings.max_carrier_age_ms,
        )
        if not age.accepted:
            return DispatchResult(
                Disposition.DEAD_LETTER,
                f"carrier_{age.verdict.value}",
                f"carrier age {age.age_ms} ms against a maximum of "
                f"{self._settings.max_carrier_age_ms} ms (W14)",
            )
        path = DispatchPath.START if envelope.kind is CarrierKind.START else DispatchPath.RESUME
        tombstone = await self._executions.tombstone(envelope.execution_id)
        decision = gate(path, tombstone=tombstone, carrier_tenant=envelope.tenant_id)
        if decision.action is GateAction.DISPATCH:
            return await self._affinity.route(carrier)
        if decision.release_dedup and envelope.dedup_key:
            # The key would otherwise answer with the deleted execution for seven days.
            await self._dedup.release(
                envelope.dedup_key, envelope.execution_id, tenant_id=envelope.tenant_id
            )
        return ack("execution_deleted", f"execution {envelope.execution_id} was deleted (W13)")

    def _foreign(self, carrier: Carrier) -> DispatchResult | None:
        """A carrier of another config family or budget generation: left pending (W12).

        First of all gates: the carrier age and the reclaim rules are this pool's, which must
        never judge a carrier written under another's.
        """
        consume = decide_consume(carrier.envelope.generations, self._settings.generations)
        if consume.executes:
            return None
        event = consume.event or consume.action.value
        log.warning(
            "event=%s execution_id=%s message_id=%s: %s",
            event,
            carrier.execution_id,
            carrier.message_id,
            consume.detail,
        )
        return DispatchResult(Disposition.LEAVE_PENDING, event, consume.detail)

    async def _reclaim_skipped(self, carrier: Carrier) -> DispatchResult | None:
        """W2, #50, P6: a reclaimed carrier waits while a live holder works on its execution;
        a dead holder's lease is released here, so the carrier takes it over."""
        holder: Lease | None = None
        try:
            holder = await self._leases.holder(carrier.execution_id)
            lease = LeaseLookup.FREE if holder is None else LeaseLookup.HELD
        except Exception as exc:
            log.warning(
                "event=reclaim.lease_lookup_failed execution_id=%s error=%r: left pending",
                carrier.execution_id,
                exc,
            )
            lease = LeaseLookup.UNKNOWN
        liveness = None if holder is None else await self._liveness(holder)
        decision = decide_reclaimed(lease, liveness)
        if decision.action is ReclaimAction.TAKE_OVER:
            assert holder is not None and liveness is not None
            return await self._take_over(carrier, holder, liveness)
        if decision.runs:
            return None
        log.info(
            "event=reclaim.skipped_live_lease message_id=%s execution_id=%s deliveries=%d "
            "reason=%s: left pending while the lease holder works",
            carrier.message_id,
            carrier.execution_id,
            carrier.deliveries,
            decision.reason.value,
        )
        return DispatchResult(Disposition.LEAVE_PENDING, RECLAIM_SKIPPED, decision.reason.value)

    async def _liveness(self, holder: Lease) -> HolderLiveness:
        """What the registry says of ``holder``'s worker (W16)."""
        stale_after = stale_heartbeat_seconds(self._settings.lease_ttl_ms / 1000)
        usable = self._settings.registry_enabled and not self._settings.holder_liveness_disabled
        if not usable:
            return HolderLiveness(HolderStatus.UNKNOWN, None, stale_after, usable=False)
        try:
            instance = await self._registry.get(holder.holder_id)
        except Exception as exc:
            log.warning(
                "event=reclaim.registry_lookup_failed execution_id=%s holder=%s error=%r: "
                "left pending",
                holder.execution_id,
                holder.holder_id,
                exc,
            )
            return HolderLiveness(HolderStatus.UNKNOWN, None, stale_after)
        if instance is None:
            return HolderLiveness(HolderStatus.ABSENT, None, stale_after)
        age = (self._clock.now_ms() - instance.heartbeat_ms) / 1000
        return HolderLiveness(holder_status(instance.status), age, stale_after)

    async def _take_over(
        self, carrier: Carrier, holder: Lease, liveness: HolderLiveness
    ) -> DispatchResult | None:
        """Release a dead holder's lease — only if it is still exactly that one — so this
        carrier acquires it with a new generation (P6); a frozen holder is fenced off."""
        try:
            released = await self._leases.release(holder)
        except Exception as exc:
            log.warning(
                "event=reclaim.takeover_failed execution_id=%s holder=%s error=%r: left pending",
                holder.execution_id,
                holder.holder_id,
                exc,
            )
            return DispatchResult(Disposition.LEAVE_PENDING, RECLAIM_SKIPPED, "takeover_failed")
        age = liveness.heartbeat_age_seconds
        log.warning(
            "event=reclaim.took_over execution_id=%s holder=%s generation=%d holder_status=%s "
            "heartbeat_age_s=%s released=%s: the lease holder is gone; this worker continues "
            "the execution from its checkpoint",
            holder.execution_id,
            holder.holder_id,
            holder.generation,
            liveness.status.value,
            "none" if age is None else f"{age:.1f}",
            released,
        )
        return None  # on to the lease: free now, or someone else's (then the W5 table)

    async def admit(self, carrier: Carrier) -> Admission:
        """The pause gate (W23): park a paused execution's carrier; the operator flags.

        One round trip per dispatch, none per step. A parked carrier is kept among the
        execution's parked carriers before it is acked, so the execution never loses it (I0);
        it keeps its source's age (W14), its stream id's time included.
        """
        envelope = carrier.envelope
        stamp = copy_timestamp_ms(
            now_ms=self._clock.now_ms(),
            payload_timestamp_ms=envelope.timestamp_ms,
            stream_id=carrier.message_id,
        )
        kept = envelope if stamp is None else copy_envelope(envelope, timestamp_ms=stamp)
        admission = await self._controls.admit(kept, parkable=carrier_parkable(envelope))
        if admission.parked:
            log.info(
                "event=carrier.parked execution_id=%s carrier=%s: the execution is paused; the "
                "carrier waits for `plaita executions unpause %s`",
                envelope.execution_id,
                envelope.resume_type or envelope.kind,
                envelope.execution_id,
            )
            parked = ack("parked", f"execution {envelope.execution_id} is paused (W23)")
            return Admission(admission.flags, parked)
        if admission.stranded:
            await self._release_stranded(envelope.execution_id, admission.stranded)
        return Admission(admission.flags)

    async def _release_stranded(
        self, execution_id: str, carriers: tuple[ParkedCarrier, ...]
    ) -> None:
        # An unpause stopped between clearing the flag and re-enqueueing: finish its job.
        for carrier in carriers:
            await self._queue.enqueue(carrier.envelope)
        await self._controls.unpark(execution_id, [c.carrier_id for c in carriers])
        log.warning(
            "event=carrier.unparked_stranded execution_id=%s count=%d: carriers were still "
            "parked although the execution is not paused (an unpause stopped half-way); they "
            "were enqueued again",
            execution_id,
            len(carriers),
        )

    async def on_conflict(self, carrier: Carrier) -> DispatchResult:
        """Another holder has the lease: ack or leave pending by the W5 table."""
        envelope = carrier.envelope
        holder = await self._leases.holder(envelope.execution_id)
        instance = None
        if holder is not None and self._settings.registry_enabled:
            instance = await self._registry.get(holder.holder_id)
        heartbeat_age = (
            None if instance is None else (self._clock.now_ms() - instance.heartbeat_ms) / 1000
        )
        decision = decide_conflict(
            carrier=conflict_carrier(envelope),
            reclaimed=carrier.reclaimed,
            holder=holder_status(None if instance is None else instance.status),
            heartbeat_age_seconds=heartbeat_age,
            lease_ttl_seconds=self._settings.lease_ttl_ms / 1000,
            registry_enabled=self._settings.registry_enabled,
            holder_liveness_disabled=self._settings.holder_liveness_disabled,
            holder_is_self=holder is not None and holder.holder_id == self._settings.holder_id,
        )
        holder_name = holder.holder_id if holder else "nobody (expired just now)"
        if decision.warn_no_effect:
            log.warning(
                "event=resume.no_effect execution_id=%s holder=%s: a live worker advances this "
                "execution; the %s carrier was acked without effect",
                envelope.execution_id,
                holder_name,
                _kind(envelope),
            )
        if decision.defer_ms is not None:
            copy = copy_envelope(envelope)
            due = self._clock.now_ms() + decision.defer_ms
            return DispatchResult(
                Disposition.ACK,
                "lease_conflict_deferred",
                f"held by {holder_name}; tried again in {decision.defer_ms} ms",
                schedule=((copy, due),),
            )
        disposition = Disposition.ACK if decision.ack else Disposition.LEAVE_PENDING
        return DispatchResult(disposition, "lease_conflict", f"held by {holder_name}")


def _kind(envelope: TaskEnvelope) -> str:
    return str(envelope.resume_type or envelope.kind)
