"""``decide_reclaimed``: which reclaimed carriers run (W2), one test per row of its table."""

from __future__ import annotations

import pytest

from plaita.domain.dead_letter import LeaseLookup
from plaita.domain.reclaim import ReclaimAction, ReclaimReason, decide_reclaimed


@pytest.mark.parametrize(
    ("lease", "action", "reason"),
    [
        (LeaseLookup.FREE, ReclaimAction.RUN, ReclaimReason.HOLDER_GONE),  # R1
        (LeaseLookup.HELD, ReclaimAction.SKIP, ReclaimReason.LEASE_HELD),  # R2
        (LeaseLookup.UNKNOWN, ReclaimAction.SKIP, ReclaimReason.LEASE_UNKNOWN),  # R3
    ],
    ids=["R1-free", "R2-held", "R3-lookup-failed"],
)
def test_a_reclaimed_carrier_runs_only_when_nobody_holds_its_lease(
    lease: LeaseLookup, action: ReclaimAction, reason: ReclaimReason
) -> None:
    decision = decide_reclaimed(lease)
    assert (decision.action, decision.reason) == (action, reason)
    assert decision.runs is (action is ReclaimAction.RUN)


def test_every_lease_lookup_has_a_row() -> None:
    """The table is total: a new lookup answer cannot slip through undecided."""
    assert {decide_reclaimed(lease).reason for lease in LeaseLookup} == set(ReclaimReason)
