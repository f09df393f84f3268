"""Which reclaimed carriers run (W2, W5, #50, P6): the redelivery rule, decided here.

A carrier reclaimed from another consumer may be a dead holder's only carrier, or a
duplicate of one a live holder is working on. A live holder refreshes its carriers and its
lease at every renewal and its registry record at every heartbeat, both at least every two
seconds (``plaita.domain.lease``): so a reclaimed carrier whose lease names a holder that is
provably gone — no registry record, stopped, or a heartbeat older than two beats — is a dead
(or frozen) holder's, and its execution is *taken over*: the dead lease is released (only if
it is still exactly that holder's and generation) and the carrier runs under a new
generation, which fences the old holder off should it wake up (W4). Anything less than proof
leaves the carrier pending, as does a lookup that failed. A skip costs the carrier nothing:
attempts are counted with the execution, never by Redis's delivery counter (W2).

 #  lease        holder (registry)                         -> action     reason
 1  free         -                                         -> RUN        holder_gone
 2  held         registry off, or liveness check disabled  -> SKIP       live_lease
 3  held         starting/running/draining/stopping, fresh -> SKIP       live_lease
 4  held         absent, stopped, or heartbeat stale       -> TAKE_OVER  holder_dead
 5  held         unknown (unreadable status, read failed)  -> SKIP       holder_liveness_unknown
 6  lookup fails -                                         -> SKIP       lease_lookup_failed

Row 4 and a holder without a registry (``--no-registry``, absent): such a live holder refreshes
its own carriers, so only a duplicate of its carrier is ever reclaimed; taking its lease
over costs it the step it runs (fenced off, redone here), never a second advancer.
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.dead_letter import LeaseLookup
from plaita.domain.lease_conflict import HolderStatus


class ReclaimAction(enum.StrEnum):
    RUN = "run"
    SKIP = "skip"
    TAKE_OVER = "take_over"


class ReclaimReason(enum.StrEnum):
    HOLDER_GONE = "holder_gone"
    LEASE_HELD = "live_lease"
    HOLDER_DEAD = "holder_dead"
    HOLDER_UNKNOWN = "holder_liveness_unknown"
    LEASE_UNKNOWN = "lease_lookup_failed"


@attrs.frozen
class ReclaimDecision:
    action: ReclaimAction
    reason: ReclaimReason

    @property
    def runs(self) -> bool:
        """The carrier goes on to the lease (after the takeover's release, for row 4)."""
        return self.action is not ReclaimAction.SKIP


#: Statuses of a worker that may still be advancing what it holds.
_MAY_HOLD = frozenset(
    {HolderStatus.STARTING, HolderStatus.RUNNING, HolderStatus.DRAINING, HolderStatus.STOPPING}
)


@attrs.frozen
class HolderLiveness:
    """What the registry says of a lease's holder, and how this worker may use it."""

    status: HolderStatus
    #: Seconds since its last heartbeat; None without a record.
    heartbeat_age_seconds: float | None
    #: Older than this, a heartbeat is a dead or frozen holder's (``stale_heartbeat_seconds``).
    stale_after_seconds: float
    #: This worker keeps a registry, and the operator did not switch the liveness check off.
    usable: bool = True

    @property
    def dead(self) -> bool:
        if self.status in (HolderStatus.ABSENT, HolderStatus.STOPPED):
            return True
        age = self.heartbeat_age_seconds
        # A heartbeat from the future (clock skew) proves nothing either way.
        return self.status in _MAY_HOLD and age is not None and age > self.stale_after_seconds


def decide_reclaimed(lease: LeaseLookup, holder: HolderLiveness | None = None) -> ReclaimDecision:
    """May a reclaimed carrier run now? When nobody holds its execution's lease, or when
    the registry proves its holder dead (``holder``: None when it was not looked up)."""
    if lease is LeaseLookup.FREE:
        return ReclaimDecision(ReclaimAction.RUN, ReclaimReason.HOLDER_GONE)
    if lease is LeaseLookup.UNKNOWN:
        return ReclaimDecision(ReclaimAction.SKIP, ReclaimReason.LEASE_UNKNOWN)
    if holder is None or not holder.usable:
        return ReclaimDecision(ReclaimAction.SKIP, ReclaimReason.LEASE_HELD)
    if holder.dead:
        return ReclaimDecision(ReclaimAction.TAKE_OVER, ReclaimReason.HOLDER_DEAD)
    if holder.status is HolderStatus.UNKNOWN:
        return ReclaimDecision(ReclaimAction.SKIP, ReclaimReason.HOLDER_UNKNOWN)
    return ReclaimDecision(ReclaimAction.SKIP, ReclaimReason.LEASE_HELD)
