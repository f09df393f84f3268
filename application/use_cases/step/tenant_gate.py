"""The tenant gate (W24): a suspended tenant's carriers are parked, a tenant whose status this
worker may not judge has its carriers held, and a running carrier learns the tenant's quota.

After the ``before_lease`` gates and before the pause gate. One read per dispatch (the
tenant's record and its parked count), started before the ``before_lease`` gates
(``read_ahead``) so that on Redis it leaves in the same pipeline as their tombstone read: it
adds no round trip to a dispatch (on a cluster, a request to the tenant's node, sent at the
same time). The answer is ``decide_tenant_gate``'s. A park is kept only if the record's
version is still the one decided on, so a resume that lands in between is never missed (the
gate reads and decides again, a bounded number of times, then leaves the carrier pending). A
parked carrier is kept before it is acked (I0) and keeps its source's age (W14); a held one
is left pending, not acked, with a WARNING (at most one a minute per tenant and reason) that
names the fix.
"""

from __future__ import annotations

import asyncio
import logging

import attrs

from plaita.application.ports import (
    Clock,
    TaskQueue,
    TenantAdmission,
    TenantDirectory,
    WaitingNotes,
)
from plaita.application.use_cases.step.dispatch import Carrier, DispatchResult, Disposition
from plaita.domain.envelope import TaskEnvelope, copy_envelope
from plaita.domain.flow_control import Waiting, WaitReason
from plaita.domain.operator_controls import carrier_parkable
from plaita.domain.tenant_status import (
    TenantGateAction,
    TenantGateReason,
    decide_tenant_gate,
    releases_stranded,
)
from plaita.domain.tombstone import copy_timestamp_ms

log = logging.getLogger("plaita.worker.step")

#: The outcome of a carrier parked because its tenant is suspended.
TENANT_SUSPENDED = "tenant_suspended"
#: The outcome of a carrier left pending: this worker may not act on its tenant's status.
TENANT_STATUS_STALE = "tenant_status_stale"
#: The outcome of a carrier left pending after every park lost its race with a status write.
TENANT_STATUS_CONTENDED = "tenant_status_contended"
#: How often a park whose record moved reads and decides again before leaving the carrier.
PARK_ATTEMPTS = 3
#: How many stranded parked carriers one dispatch gives back to the queue.
STRANDED_BATCH = 100
#: At most one WARNING per tenant and reason this often (a held carrier comes back with every
#: reclaim).
WARN_INTERVAL_MS = 60_000


@attrs.frozen
class TenantAdmitted:
    """The tenant gate's answer: the carrier parked or held (its result), or the quota it
    runs under (None: no limit)."""

    stopped: DispatchResult | None = None
    max_running: int | None = None


class ReadAhead:
    """The tenant's record, being read while the dispatch does something else."""

    def __init__(self, reading: asyncio.Future[TenantAdmission]) -> None:
        self._reading = reading

    async def result(self) -> TenantAdmission:
        return await self._reading

    def discard(self) -> None:
        """Not needed after all (the carrier went no further): cancel it, and never let a
        failure of it be reported as unretrieved."""
        self._reading.cancel()
        self._reading.add_done_callback(_retrieve)


def _retrieve(reading: asyncio.Future[TenantAdmission]) -> None:
    if not reading.cancelled():
        reading.exception()


class TenantGate:
    def __init__(
        self,
        *,
        directory: TenantDirectory,
        queue: TaskQueue,
        waiting: WaitingNotes,
        clock: Clock,
        deployment_epoch: int | None,
    ) -> None:
        self._directory = directory
        self._queue = queue
        self._waiting = waiting
        self._clock = clock
        self._epoch = deployment_epoch
        self._warned_at: dict[tuple[str, TenantGateReason], int] = {}

    def read_ahead(self, carrier: Carrier) -> ReadAhead:
        """Start reading the carrier's tenant now; ``admit`` it, or ``discard`` it."""
        return ReadAhead(
            asyncio.ensure_future(self._directory.admission(carrier.envelope.tenant_id))
        )

    async def admit(self, carrier: Carrier, ahead: ReadAhead) -> TenantAdmitted:
        envelope = carrier.envelope
        tenant_id = envelope.tenant_id
        parkable = carrier_parkable(envelope)
        found = await ahead.result()
        for _ in range(PARK_ATTEMPTS):
            gate = decide_tenant_gate(found.record, tenant_id, self._epoch, parkable)
            if gate.action is TenantGateAction.RUN:
                await self._release_stranded(tenant_id, found)
                return TenantAdmitted(max_running=gate.max_running)
            if gate.action is TenantGateAction.HOLD:
                self._warn(tenant_id, gate.reason, carrier, gate.detail)
                held = DispatchResult(
                    Disposition.LEAVE_PENDING,
                    TENANT_STATUS_STALE,
                    gate.detail,
                    waited=WaitReason.TENANT_STATUS_STALE,
                )
                return TenantAdmitted(held)
            if await self._directory.park(self._kept(carrier), expected_version=found.version):
                return TenantAdmitted(await self._parked(carrier, gate.detail))
            found = await self._directory.admission(tenant_id)  # a status write came between
        detail = (
            f"the status of tenant {tenant_id!r} changed {PARK_ATTEMPTS} times while this "
            "worker parked the carrier; it is left pending and judged again at its redelivery"
        )
        log.warning(
            "event=tenant.park_contended tenant_id=%s execution_id=%s: %s",
            tenant_id,
            envelope.execution_id,
            detail,
        )
        return TenantAdmitted(
            DispatchResult(Disposition.LEAVE_PENDING, TENANT_STATUS_CONTENDED, detail)
        )

    def _kept(self, carrier: Carrier) -> TaskEnvelope:
        envelope = carrier.envelope
        stamp = copy_timestamp_ms(
            now_ms=self._clock.now_ms(),
            payload_timestamp_ms=envelope.timestamp_ms,
            stream_id=carrier.message_id,
        )
        return envelope if stamp is None else copy_envelope(envelope, timestamp_ms=stamp)

    async def _parked(self, carrier: Carrier, detail: str) -> DispatchResult:
        envelope = carrier.envelope
        log.info(
            "event=carrier.parked_tenant tenant_id=%s execution_id=%s carrier=%s: the tenant is "
            "suspended; the carrier waits for `plaita tenants resume %s`",
            envelope.tenant_id,
            envelope.execution_id,
            envelope.resume_type or envelope.kind,
            envelope.tenant_id,
        )
        note = Waiting(
            WaitReason.TENANT_SUSPENDED,
            since_ms=self._clock.now_ms(),
            detail=detail,
            key=envelope.tenant_id,
        )
        try:
            await self._waiting.note(envelope.execution_id, note)
        except Exception as exc:  # best effort: a note only shows the reason
            log.warning(
                "event=tenant.waiting_note_failed execution_id=%s reason=%s error=%r: the carrier "
                "is parked; only the console's reason is missing",
                envelope.execution_id,
                note.reason.value,
                exc,
            )
        return DispatchResult(
            Disposition.ACK, TENANT_SUSPENDED, detail, waited=WaitReason.TENANT_SUSPENDED
        )

    async def _release_stranded(self, tenant_id: str, found: TenantAdmission) -> None:
        # A resume stopped between writing "active" and re-enqueueing: finish its job.
        if not releases_stranded(found.record, found.parked, now_ms=self._clock.now_ms()):
            return
        carriers = await self._directory.parked(tenant_id, limit=STRANDED_BATCH)
        for parked in carriers:
            await self._queue.enqueue(parked.envelope)
        await self._directory.unpark(tenant_id, [parked.carrier_id for parked in carriers])
        log.warning(
            "event=tenant.unparked_stranded tenant_id=%s count=%d: carriers were still parked "
            "although the tenant is active (a resume stopped half-way); they were enqueued again",
            tenant_id,
            len(carriers),
        )

    def _warn(
        self, tenant_id: str, reason: TenantGateReason, carrier: Carrier, detail: str
    ) -> None:
        now_ms = self._clock.now_ms()
        last = self._warned_at.get((tenant_id, reason))
        level = logging.DEBUG
        if last is None or now_ms - last >= WARN_INTERVAL_MS:
            self._warned_at[(tenant_id, reason)] = now_ms
            level = logging.WARNING
        if reason is TenantGateReason.WORKER_BEHIND:
            log.log(
                level,
                "event=tenant.worker_behind tenant_id=%s execution_id=%s message_id=%s: %s; the "
                "carrier is left pending",
                tenant_id,
                carrier.execution_id,
                carrier.message_id,
                detail,
            )
            return
        log.log(
            level,
            "event=tenant.status_stale tenant_id=%s execution_id=%s message_id=%s: %s; the "
            "carrier is left pending",
            tenant_id,
            carrier.execution_id,
            carrier.message_id,
            detail,
        )
