"""Tenant lifecycle and quota (W24): list, show, suspend, resume, set or clear the quota.

Every write builds the next record in ``domain.tenant_status`` (stamped with this process's
deployment epoch) and stores it with a compare-and-set on the version it read, retried a
bounded number of times. Suspending parks the tenant's carriers from the next dispatch on;
resuming writes ``active`` first, then gives the parked carriers back in batches: each batch
is enqueued, and only then forgotten, so a crash in between duplicates a carrier and never
loses one (I0). A resume that stopped half-way is finished by running it again, or by the
first worker that meets the tenant's stranded carriers once the grace has passed
(``releases_stranded``). Every action is written to the ``plaita.audit`` log.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from plaita.application.actor import current_actor
from plaita.application.ports import Clock, TaskQueue, TenantDirectory, WaitingNotes
from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import TenantWriteConflictError
from plaita.domain.tenancy import validate_tenant_id
from plaita.domain.tenant_status import (
    NO_VERSION,
    TenantGate,
    TenantRecord,
    TenantStatus,
    check_max_running,
    check_suspendable,
    decide_tenant_gate,
    resumed,
    suspended,
    with_quota,
)

JSON = Any
audit = logging.getLogger("plaita.audit")
log = logging.getLogger("plaita.tenants")

#: How many parked carriers a resume enqueues, then forgets, at a time.
RELEASE_BATCH = 100
#: How often a write reads and compares-and-sets again when another writer moved the record.
WRITE_ATTEMPTS = 5


class TenantAction(enum.StrEnum):
    SUSPEND = "suspend"
    RESUME = "resume"
    QUOTA = "quota"


@attrs.frozen
class TenantView:
    """A tenant as an operator sees it: its record, its parked carriers, and what this
    deployment's workers do with its carriers now."""

    tenant_id: str
    record: TenantRecord | None
    parked: int
    gate: TenantGate

    def to_json(self) -> dict[str, JSON]:
        record = self.record
        return {
            "tenant_id": self.tenant_id,
            "status": TenantStatus.ACTIVE.value if record is None else record.status.value,
            "recorded": record is not None,
            "max_running": None if record is None else record.max_running,
            "epoch": None if record is None else record.epoch,
            "updated_at_ms": None if record is None else record.updated_at_ms,
            "version": NO_VERSION if record is None else record.version,
            "parked": self.parked,
            "workers": self.gate.action.value,
            "workers_detail": self.gate.detail,
        }


@attrs.frozen
class TenantActionResult:
    """What one tenant action did."""

    tenant_id: str
    action: TenantAction
    #: suspended, already_suspended, resumed, already_active, quota_set or quota_unchanged.
    outcome: str
    record: TenantRecord
    #: Parked carriers enqueued again (resume).
    requeued: int = 0
    #: Parked carriers still waiting after the action.
    parked: int = 0

    def to_json(self) -> dict[str, JSON]:
        return {
            "tenant_id": self.tenant_id,
            "action": self.action.value,
            "outcome": self.outcome,
            "status": self.record.status.value,
            "max_running": self.record.max_running,
            "epoch": self.record.epoch,
            "version": self.record.version,
            "requeued": self.requeued,
            "parked": self.parked,
        }


class _Tenants:
    def __init__(
        self, *, directory: TenantDirectory, clock: Clock, deployment_epoch: int | None
    ) -> None:
        self._directory = directory
        self._clock = clock
        self._epoch = deployment_epoch

    async def _view(self, tenant_id: str, record: TenantRecord | None) -> TenantView:
        parked = await self._directory.parked_count(tenant_id)
        gate = decide_tenant_gate(record, tenant_id, self._epoch, parkable=True)
        return TenantView(tenant_id, record, parked, gate)

    def _current(self, record: TenantRecord | None, status: TenantStatus) -> bool:
        """The record says ``status`` already, written under this deployment's epoch."""
        return record is not None and record.status is status and record.epoch == self._epoch

    async def _write(
        self,
        tenant_id: str,
        change: Callable[[TenantRecord | None], TenantRecord | None],
    ) -> tuple[TenantRecord | None, TenantRecord]:
        """Read, let ``change`` build the next record (None: nothing to write), and
        compare-and-set it; (the record before, the record after)."""
        for _ in range(WRITE_ATTEMPTS):
            before = await self._directory.get(tenant_id)
            after = change(before)
            if after is None:
                assert before is not None
                return before, before
            expected = NO_VERSION if before is None else before.version
            if await self._directory.write(after, expected_version=expected):
                return before, after
        raise TenantWriteConflictError(
            f"tenant {tenant_id!r}'s status changed {WRITE_ATTEMPTS} times while this command "
            "wrote it (another operator at work?); nothing was written: run the command again"
        )

    def _audit(self, result: TenantActionResult) -> None:
        audit.info(
            "event=tenant.changed action=%s tenant_id=%s outcome=%s status=%s max_running=%s "
            "epoch=%s requeued=%d by=%s",
            result.action.value,
            result.tenant_id,
            result.outcome,
            result.record.status.value,
            result.record.max_running,
            result.record.epoch,
            result.requeued,
            current_actor(),
        )


class ListTenants(_Tenants):
    async def __call__(self) -> Sequence[TenantView]:
        """Every tenant with a status record, by tenant id (a tenant never suspended, resumed
        or given a quota has none: it is active without a quota)."""
        return [await self._view(r.tenant_id, r) for r in await self._directory.list()]


class ShowTenant(_Tenants):
    async def __call__(self, tenant_id: str) -> TenantView:
        """One tenant, with or without a record (then: active, no quota, by the gate's rule)."""
        validate_tenant_id(tenant_id)
        return await self._view(tenant_id, await self._directory.get(tenant_id))


class SuspendTenant(_Tenants):
    async def __call__(self, tenant_id: str) -> TenantActionResult:
        """Park the tenant's carriers from now on (the default tenant is refused by name)."""
        check_suspendable(tenant_id)
        now_ms = self._clock.now_ms()

        def change(record: TenantRecord | None) -> TenantRecord | None:
            if self._current(record, TenantStatus.SUSPENDED):
                return None
            return suspended(record, tenant_id, epoch=self._epoch, now_ms=now_ms)

        before, after = await self._write(tenant_id, change)
        outcome = "already_suspended" if before is after else "suspended"
        parked = await self._directory.parked_count(tenant_id)
        result = TenantActionResult(tenant_id, TenantAction.SUSPEND, outcome, after, parked=parked)
        self._audit(result)
        return result


class ResumeTenant(_Tenants):
    def __init__(
        self,
        *,
        directory: TenantDirectory,
        queue: TaskQueue,
        waiting: WaitingNotes,
        clock: Clock,
        deployment_epoch: int | None,
        batch: int = RELEASE_BATCH,
    ) -> None:
        super().__init__(directory=directory, clock=clock, deployment_epoch=deployment_epoch)
        self._queue = queue
        self._waiting = waiting
        self._batch = batch

    async def __call__(self, tenant_id: str) -> TenantActionResult:
        """Write the tenant active under this deployment's epoch, then give its parked
        carriers back to the queue; also how a stale status is rewritten after a new
        deployment (the default tenant too)."""
        validate_tenant_id(tenant_id)
        now_ms = self._clock.now_ms()

        def change(record: TenantRecord | None) -> TenantRecord | None:
            if self._current(record, TenantStatus.ACTIVE):
                return None
            return resumed(record, tenant_id, epoch=self._epoch, now_ms=now_ms)

        before, after = await self._write(tenant_id, change)
        requeued = await self._release(tenant_id)
        outcome = "already_active" if before is after else "resumed"
        parked = await self._directory.parked_count(tenant_id)
        result = TenantActionResult(
            tenant_id, TenantAction.RESUME, outcome, after, requeued=requeued, parked=parked
        )
        self._audit(result)
        return result

    async def _release(self, tenant_id: str) -> int:
        # Bounded by what was parked when the resume began: carriers parked meanwhile (the
        # tenant suspended again) stay parked.
        batches = -(-await self._directory.parked_count(tenant_id) // self._batch)
        requeued = 0
        for _ in range(batches):
            carriers = await self._directory.parked(tenant_id, limit=self._batch)
            if not carriers:
                break
            for carrier in carriers:
                await self._queue.enqueue(carrier.envelope)
            await self._directory.unpark(tenant_id, [c.carrier_id for c in carriers])
            requeued += len(carriers)
            await self._clear_notes(tenant_id, {c.envelope.execution_id for c in carriers})
        return requeued

    async def _clear_notes(self, tenant_id: str, execution_ids: set[str]) -> None:
        """The parked executions no longer wait for their tenant (their carriers are queued);
        best effort: a note left behind only shows a stale reason until it expires."""
        with tenant_scope(tenant_id):
            for execution_id in sorted(execution_ids):
                try:
                    await self._waiting.clear(execution_id)
                except Exception as exc:
                    log.warning(
                        "event=tenant.waiting_clear_failed tenant_id=%s execution_id=%s error=%r: "
                        "its carrier is queued; the console may show it waiting until the "
                        "note expires",
                        tenant_id,
                        execution_id,
                        exc,
                    )


class SetTenantQuota(_Tenants):
    async def __call__(self, tenant_id: str, max_running: int | None) -> TenantActionResult:
        """Set the tenant's quota (None: no limit), under this deployment's epoch."""
        validate_tenant_id(tenant_id)
        check_max_running(max_running)
        now_ms = self._clock.now_ms()

        def change(record: TenantRecord | None) -> TenantRecord | None:
            unchanged = record is not None and record.max_running == max_running
            if unchanged and record is not None and record.epoch == self._epoch:
                return None
            return with_quota(record, tenant_id, max_running, epoch=self._epoch, now_ms=now_ms)

        before, after = await self._write(tenant_id, change)
        outcome = "quota_unchanged" if before is after else "quota_set"
        parked = await self._directory.parked_count(tenant_id)
        result = TenantActionResult(tenant_id, TenantAction.QUOTA, outcome, after, parked=parked)
        self._audit(result)
        return result
