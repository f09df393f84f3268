"""A tenant's status record and the worker's tenant gate (W24, flow control).

A tenant is ``active`` or ``suspended`` and may have a quota (``max_running``: at most that
many of its executions running at once; the slot tables enforce it). The record names the
deployment epoch that wrote it, so a worker acts only on a status written under its own
deployment (``PLAITA_DEPLOYMENT_EPOCH``, the same positive integer for every process of a
deployment, raised when a deployment is replaced):

 deployment epoch  record                          default tenant     any other tenant
 none              missing                         run, no quota      run, no quota
 none              present (any epoch)             its status         its status
 E                 written under a newer epoch     hold (worker old)  hold (worker old)
 E                 missing, no epoch, older than E run, no quota      hold (status stale)
 E                 written under E                 its status         its status

"its status": active → run with its quota; suspended → park the carrier (kept, then acked),
except a cancel carrier, which runs (cancelling must still work). "hold": the carrier is
left pending, not acked, and a WARNING names the fix. The default tenant fails open: it
holds the deployment's unnamed work, and it cannot be suspended (``check_suspendable``).

Every write of a status or a quota stamps the writer's epoch and the next ``version``; the
store writes it with a compare-and-set on the version it read.
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.errors import InvalidTenantQuotaError, TenantActionRefusedError
from plaita.domain.tenancy import DEFAULT_TENANT, check_same_tenant, validate_tenant_id

#: The largest quota a tenant may have (``max_running``).
MAX_TENANT_QUOTA = 1_000_000
#: The version of a record never written (the compare-and-set of a first write expects it).
NO_VERSION = 0


class TenantStatus(enum.StrEnum):
    ACTIVE = "active"
    SUSPENDED = "suspended"


@attrs.frozen
class TenantRecord:
    """A tenant's status and quota, as the deployment of ``epoch`` wrote it."""

    tenant_id: str
    status: TenantStatus
    max_running: int | None
    #: The deployment epoch of the writer (None: written by a process without one).
    epoch: int | None
    updated_at_ms: int
    #: 1 for the first write, one more for every write after (the compare-and-set's value).
    version: int

    def to_json(self) -> dict[str, object]:
        return {
            "tenant_id": self.tenant_id,
            "status": self.status.value,
            "max_running": self.max_running,
            "epoch": self.epoch,
            "updated_at_ms": self.updated_at_ms,
            "version": self.version,
        }


def check_max_running(value: object) -> int | None:
    """A quota: an integer from 1 to ``MAX_TENANT_QUOTA``, or None (no limit)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TENANT_QUOTA:
        raise InvalidTenantQuotaError(
            f"max_running must be an integer from 1 to {MAX_TENANT_QUOTA}, got {value!r}; "
            "clear the quota instead (--no-limit) for no limit"
        )
    return value


def check_suspendable(tenant_id: str) -> str:
    """``tenant_id`` if it may be suspended; the default tenant may not (it fails open)."""
    if validate_tenant_id(tenant_id) == DEFAULT_TENANT:
        raise TenantActionRefusedError(
            f"the {DEFAULT_TENANT!r} tenant holds the deployment's own work and cannot be "
            "suspended; pause its executions instead (plaita executions bulk pause), or give "
            "it a quota (plaita tenants quota default --max-running N)"
        )
    return tenant_id


@attrs.frozen
class _Keep:
    """The quota stays as the record had it."""


KEEP = _Keep()


def _next(
    record: TenantRecord | None,
    tenant_id: str,
    *,
    epoch: int | None,
    now_ms: int,
    status: TenantStatus | None = None,
    max_running: int | _Keep | None = None,
) -> TenantRecord:
    validate_tenant_id(tenant_id)
    if record is not None:
        check_same_tenant(record.tenant_id, tenant_id, "the status record")
    if isinstance(max_running, _Keep):
        max_running = record.max_running if record is not None else None
    if status is None:
        status = record.status if record is not None else TenantStatus.ACTIVE
    return TenantRecord(
        tenant_id=tenant_id,
        status=status,
        max_running=check_max_running(max_running),
        epoch=epoch,
        updated_at_ms=now_ms,
        version=(record.version if record is not None else NO_VERSION) + 1,
    )


def suspended(
    record: TenantRecord | None, tenant_id: str, *, epoch: int | None, now_ms: int
) -> TenantRecord:
    """The record after a suspend: its quota kept, the writer's epoch stamped."""
    check_suspendable(tenant_id)
    return _next(
        record,
        tenant_id,
        epoch=epoch,
        now_ms=now_ms,
        status=TenantStatus.SUSPENDED,
        max_running=KEEP,
    )


def resumed(
    record: TenantRecord | None, tenant_id: str, *, epoch: int | None, now_ms: int
) -> TenantRecord:
    """The record after a resume (active; also how a status is rewritten under a new epoch)."""
    return _next(
        record, tenant_id, epoch=epoch, now_ms=now_ms, status=TenantStatus.ACTIVE, max_running=KEEP
    )


def with_quota(
    record: TenantRecord | None,
    tenant_id: str,
    max_running: int | None,
    *,
    epoch: int | None,
    now_ms: int,
) -> TenantRecord:
    """The record with a new quota (None: no limit); a missing record becomes active.

    Written under the writer's epoch like a status: a quota set under an older deployment
    is stale with it.
    """
    return _next(
        record,
        tenant_id,
        epoch=epoch,
        now_ms=now_ms,
        max_running=check_max_running(max_running),
    )


class TenantGateAction(enum.StrEnum):
    #: Dispatch the carrier (with the tenant's quota, if any).
    RUN = "run"
    #: Keep the carrier among the tenant's parked carriers, then ack it.
    PARK = "park"
    #: Leave the carrier pending, not acked: this worker must not judge the tenant's status.
    HOLD = "hold"


class TenantGateReason(enum.StrEnum):
    ACTIVE = "active"
    NO_RECORD = "no_record"
    DEFAULT_FAILS_OPEN = "default_fails_open"
    SUSPENDED = "suspended"
    CANCEL_PASSES = "cancel_passes"
    STATUS_STALE = "status_stale"
    WORKER_BEHIND = "worker_behind"


@attrs.frozen
class TenantGate:
    action: TenantGateAction
    reason: TenantGateReason
    detail: str
    #: The tenant's quota for the slot tables (None: no limit); set only when it runs.
    max_running: int | None = None

    @property
    def runs(self) -> bool:
        return self.action is TenantGateAction.RUN


def decide_tenant_gate(
    record: TenantRecord | None,
    tenant_id: str,
    deployment_epoch: int | None,
    parkable: bool,
) -> TenantGate:
    """What the worker does with a carrier of ``tenant_id`` (the module's table)."""
    newer = record.epoch if record is not None else None
    if newer is not None and deployment_epoch is not None and newer > deployment_epoch:
        return TenantGate(
            TenantGateAction.HOLD,
            TenantGateReason.WORKER_BEHIND,
            f"the status of tenant {tenant_id!r} was written under deployment epoch {newer}, "
            f"newer than this worker's {deployment_epoch}: this worker is older than the "
            "deployment; restart this worker with the deployment's PLAITA_DEPLOYMENT_EPOCH",
        )
    current = record is not None and (deployment_epoch is None or record.epoch == deployment_epoch)
    if record is None and deployment_epoch is None:
        return TenantGate(
            TenantGateAction.RUN, TenantGateReason.NO_RECORD, f"tenant {tenant_id!r} has no status"
        )
    if not current:
        written = (
            "has no status record"
            if record is None
            else "has a status written without a deployment epoch"
            if record.epoch is None
            else f"has a status written under deployment epoch {record.epoch}"
        )
        if tenant_id == DEFAULT_TENANT:
            return TenantGate(
                TenantGateAction.RUN,
                TenantGateReason.DEFAULT_FAILS_OPEN,
                f"the default tenant {written}, not under epoch {deployment_epoch}: it runs "
                "without a quota",
            )
        return TenantGate(
            TenantGateAction.HOLD,
            TenantGateReason.STATUS_STALE,
            f"tenant {tenant_id!r} {written}, not under this deployment's epoch "
            f"{deployment_epoch}: its carriers wait; write its status under the current "
            f"deployment, e.g. `plaita tenants resume {tenant_id}` (or `plaita tenants suspend "
            f"{tenant_id}`)",
        )
    assert record is not None
    if record.status is TenantStatus.SUSPENDED:
        if not parkable:
            return TenantGate(
                TenantGateAction.RUN,
                TenantGateReason.CANCEL_PASSES,
                f"tenant {tenant_id!r} is suspended; a cancel still runs",
                max_running=record.max_running,
            )
        return TenantGate(
            TenantGateAction.PARK,
            TenantGateReason.SUSPENDED,
            f"tenant {tenant_id!r} is suspended: the carrier waits for "
            f"`plaita tenants resume {tenant_id}`",
        )
    return TenantGate(
        TenantGateAction.RUN,
        TenantGateReason.ACTIVE,
        f"tenant {tenant_id!r} is active",
        max_running=record.max_running,
    )


#: How long after a tenant's last status write a worker leaves its parked carriers to the
#: resume that wrote it: a resume re-enqueues them itself, and a worker that met them too
#: would only enqueue copies.
STRANDED_GRACE_MS = 60_000


def releases_stranded(record: TenantRecord | None, parked: int, *, now_ms: int) -> bool:
    """Whether a worker re-enqueues an active tenant's parked carriers: a resume stopped
    half-way (between writing ``active`` and re-enqueueing) left them behind."""
    if record is None or record.status is not TenantStatus.ACTIVE or parked == 0:
        return False
    return now_ms - record.updated_at_ms >= STRANDED_GRACE_MS
