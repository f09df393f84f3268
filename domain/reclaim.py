"""Which reclaimed carriers run (W2, W5, #50): the redelivery rule, decided here.

A carrier reclaimed from another consumer may be a dead holder's only carrier, or a
duplicate of one a live holder is working on. While its execution's lease is held it is
left pending — running it would only meet the lease — and a lookup that failed proves
nothing, so it is left pending too. A skip costs the carrier nothing: attempts are counted
with the execution, never by Redis's delivery counter (W2).

 #  lease        -> action   reason
 R1 free         -> RUN      the holder is gone (or there never was one)
 R2 held         -> SKIP     a holder works on the execution: wait for its lease
 R3 lookup fails -> SKIP     unknown is never taken for free
"""

from __future__ import annotations

import enum

import attrs

from plaita.domain.dead_letter import LeaseLookup


class ReclaimAction(enum.StrEnum):
    RUN = "run"
    SKIP = "skip"


class ReclaimReason(enum.StrEnum):
    HOLDER_GONE = "holder_gone"
    LEASE_HELD = "live_lease"
    LEASE_UNKNOWN = "lease_lookup_failed"


@attrs.frozen
class ReclaimDecision:
    action: ReclaimAction
    reason: ReclaimReason

    @property
    def runs(self) -> bool:
        return self.action is ReclaimAction.RUN


def decide_reclaimed(lease: LeaseLookup) -> ReclaimDecision:
    """May a reclaimed carrier run now? Only when nobody holds its execution's lease."""
    if lease is LeaseLookup.FREE:
        return ReclaimDecision(ReclaimAction.RUN, ReclaimReason.HOLDER_GONE)
    if lease is LeaseLookup.HELD:
        return ReclaimDecision(ReclaimAction.SKIP, ReclaimReason.LEASE_HELD)
    return ReclaimDecision(ReclaimAction.SKIP, ReclaimReason.LEASE_UNKNOWN)
