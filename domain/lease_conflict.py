"""What to do with a carrier whose execution's lease another holder owns (W5).

Invariant I0: the only carrier of a non-terminal execution is never acked before a
replacement carrier exists. Every rule below is there because the incidents #50, #52,
A46-04 and B65-03 acked such a carrier and stranded an execution in ``running`` with nothing
left to wake it, or, the other way round, left a live holder's duplicate pending until it was
dead-lettered for nothing.
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.envelope import TaskEnvelope


class ConflictCarrier(enum.StrEnum):
    START = "start"
    CONTINUE = "continue"
    RETRY = "retry"
    EVENT = "event"
    TIMEOUT = "timeout"
    CANCEL = "cancel"
    CHILD = "child"


#: Carriers that decide something (A46-04/A47-F2): in the suspend window they are the
#: execution's only way to wake up, not duplicates, whatever the holder's liveness.
DECISION_CARRIERS = frozenset(
    {ConflictCarrier.EVENT, ConflictCarrier.TIMEOUT, ConflictCarrier.CANCEL}
)


def conflict_carrier(envelope: TaskEnvelope) -> ConflictCarrier:
    if envelope.resume_type is None:
        return ConflictCarrier.START
    return ConflictCarrier(envelope.resume_type.value)


class HolderStatus(enum.StrEnum):
    RUNNING = "running"
    STARTING = "starting"
    DRAINING = "draining"
    STOPPING = "stopping"
    STOPPED = "stopped"
    #: The lease names an instance the registry does not know: the holder died and the lease
    #: key is the tail of its TTL (#50).
    ABSENT = "absent"
    #: No signal: an old lease value without an instance id, or the registry read failed.
    UNKNOWN = "unknown"


def holder_status(registry_status: str | None) -> HolderStatus:
    """Read the registry's status string for the lease holder's instance (``None``: no key)."""
    if registry_status is None:
        return HolderStatus.ABSENT
    if registry_status == "closed":
        # A closed worker writes nothing more and never runs again: as good as stopped.
        return HolderStatus.STOPPED
    try:
        return HolderStatus(registry_status)
    except ValueError:
        # S18-02A: an unknown value is never taken for a live worker.
        return HolderStatus.UNKNOWN


class ConflictReason(enum.StrEnum):
    RECLAIMED_CARRIER = "reclaimed_carrier"
    HOLDER_IS_THIS_WORKER = "holder_is_this_worker"
    LIVENESS_CHECK_DISABLED = "liveness_check_disabled"
    DECISION_CARRIER = "decision_carrier"
    REGISTRY_DISABLED = "registry_disabled"
    HOLDER_ALIVE = "holder_alive"
    HOLDER_HEARTBEAT_STALE = "holder_heartbeat_stale"
    HOLDER_NOT_RUNNING = "holder_not_running"
    HOLDER_ABSENT = "holder_absent"
    HOLDER_LIVENESS_UNKNOWN = "holder_liveness_unknown"
    CHILD_DEFERRED = "child_deferred"


#: How long a child's end notice waits before it is tried again when its parent's lease is
#: held (E13, E14): the holder is most often the parent's own step counting another child.
CHILD_DEFER_MS = 200


@attrs.frozen
class ConflictDecision:
    ack: bool
    #: Log the WARNING "the resume had no effect" with what to do next (#53): an operator who
    #: keeps pressing "retry" must be able to see that nothing ran.
    warn_no_effect: bool
    reason: ConflictReason
    #: Ack, and put a copy on the delay queue this many ms later (the copy is written before
    #: the ack, so the carrier is replaced, never lost: I0). None: no copy.
    defer_ms: int | None = None


def _leave(reason: ConflictReason) -> ConflictDecision:
    return ConflictDecision(ack=False, warn_no_effect=False, reason=reason)


def _ack(carrier: ConflictCarrier, reason: ConflictReason) -> ConflictDecision:
    # A start that met its own execution's lease is a duplicate start, not a resume.
    warn = carrier is not ConflictCarrier.START
    return ConflictDecision(ack=True, warn_no_effect=warn, reason=reason)


def heartbeat_fresh(heartbeat_age_seconds: float | None, lease_ttl_seconds: float) -> bool:
    # A heartbeat from the future (clock skew) proves nothing: a dead holder ahead of our
    # clock would look alive for as long as its skew.
    return heartbeat_age_seconds is not None and 0 <= heartbeat_age_seconds < lease_ttl_seconds


def decide_conflict(
    *,
    carrier: ConflictCarrier,
    reclaimed: bool,
    holder: HolderStatus,
    heartbeat_age_seconds: float | None,
    lease_ttl_seconds: float,
    registry_enabled: bool,
    holder_liveness_disabled: bool,
    holder_is_self: bool = False,
) -> ConflictDecision:
    """Ack or leave pending a carrier whose lease is held by another holder (W5, I0).

    ``holder_is_self``: the lease names this very worker, which runs no dispatch of the
    execution (one process serialises them).
    """
    if reclaimed:
        # It was pending on another consumer, possibly a dead holder's only carrier (#50).
        # A live holder refreshes its own carriers at every renewal, so this one was not
        # refreshed; it waits for the lease to expire. Not even the legacy switch acks it.
        return _leave(ConflictReason.RECLAIMED_CARRIER)
    if holder_is_self:
        # This worker holds the lease but runs nothing of the execution: a release that
        # failed, or an acquire the client retried after it had succeeded (a killed
        # connection). Nobody renews it and it lapses within one TTL; "the holder is alive"
        # would ack what may be the execution's only carrier.
        return _leave(ConflictReason.HOLDER_IS_THIS_WORKER)
    if carrier is ConflictCarrier.CHILD:
        # A map's children end by the dozen while the parent's step holds its lease; left
        # pending, each would wait for the claim idle. Its parent reads the child's own state,
        # so a copy a moment later decides exactly as this carrier would have.
        return ConflictDecision(
            ack=True,
            warn_no_effect=False,
            reason=ConflictReason.CHILD_DEFERRED,
            defer_ms=CHILD_DEFER_MS,
        )
    if holder_liveness_disabled:
        # PLAITA_DISABLE_HOLDER_LIVENESS=1: the operator's way back to the old ack-always.
        return _ack(carrier, ConflictReason.LIVENESS_CHECK_DISABLED)
    if carrier in DECISION_CARRIERS:
        return _leave(ConflictReason.DECISION_CARRIER)  # A46-04/A47-F2, #33
    if not registry_enabled:
        # B65-03: without a registry liveness is never known; a frozen holder (SIGSTOP, GC)
        # still holds a valid lease and would wake up to find its carrier gone.
        return _leave(ConflictReason.REGISTRY_DISABLED)
    if holder is HolderStatus.RUNNING:
        if heartbeat_fresh(heartbeat_age_seconds, lease_ttl_seconds):
            # #50/#52: a live holder is advancing the execution and keeps its own carrier;
            # leaving this duplicate pending would burn deliveries into a false dead letter.
            return _ack(carrier, ConflictReason.HOLDER_ALIVE)
        return _leave(ConflictReason.HOLDER_HEARTBEAT_STALE)
    if holder is HolderStatus.ABSENT:
        return _leave(ConflictReason.HOLDER_ABSENT)  # #50: dead holder, lease is a tail
    if holder is HolderStatus.UNKNOWN:
        # The old system acked on unknown (B65-03); W5 acks only a provably alive holder.
        return _leave(ConflictReason.HOLDER_LIVENESS_UNKNOWN)
    # S18-02A: starting, draining, stopping and stopped do not promise to finish the step.
    return _leave(ConflictReason.HOLDER_NOT_RUNNING)
