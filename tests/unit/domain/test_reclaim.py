"""``decide_reclaimed``: which reclaimed carriers run (W2, P6), one test per row of its table,
and a property: a holder whose heartbeat is fresh is never taken over."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.dead_letter import LeaseLookup
from plaita.domain.lease import heartbeat_interval_seconds, stale_heartbeat_seconds
from plaita.domain.lease_conflict import HolderStatus
from plaita.domain.reclaim import (
    HolderLiveness,
    ReclaimAction,
    ReclaimReason,
    decide_reclaimed,
)

STALE = stale_heartbeat_seconds(120)  # the default lease: 2 beats of 2 s


def holder(status: HolderStatus, age: float | None = 0.5, *, usable: bool = True) -> HolderLiveness:
    return HolderLiveness(status, age, STALE, usable=usable)


@pytest.mark.parametrize(
    ("lease", "liveness", "action", "reason"),
    [
        (LeaseLookup.FREE, None, ReclaimAction.RUN, ReclaimReason.HOLDER_GONE),  # row 1
        (
            LeaseLookup.HELD,
            holder(HolderStatus.ABSENT, None, usable=False),
            ReclaimAction.SKIP,
            ReclaimReason.LEASE_HELD,
        ),  # row 2: no registry here, or the liveness check switched off
        (LeaseLookup.HELD, None, ReclaimAction.SKIP, ReclaimReason.LEASE_HELD),  # row 2
        (
            LeaseLookup.HELD,
            holder(HolderStatus.RUNNING),
            ReclaimAction.SKIP,
            ReclaimReason.LEASE_HELD,
        ),  # row 3
        (
            LeaseLookup.HELD,
            holder(HolderStatus.DRAINING, STALE),
            ReclaimAction.SKIP,
            ReclaimReason.LEASE_HELD,
        ),  # row 3: exactly at the limit is still fresh
        (
            LeaseLookup.HELD,
            holder(HolderStatus.RUNNING, STALE + 0.1),
            ReclaimAction.TAKE_OVER,
            ReclaimReason.HOLDER_DEAD,
        ),  # row 4: killed or frozen
        (
            LeaseLookup.HELD,
            holder(HolderStatus.ABSENT, None),
            ReclaimAction.TAKE_OVER,
            ReclaimReason.HOLDER_DEAD,
        ),  # row 4: its record lapsed
        (
            LeaseLookup.HELD,
            holder(HolderStatus.STOPPED, 0.1),
            ReclaimAction.TAKE_OVER,
            ReclaimReason.HOLDER_DEAD,
        ),  # row 4: it said it stopped
        (
            LeaseLookup.HELD,
            holder(HolderStatus.RUNNING, -30.0),
            ReclaimAction.SKIP,
            ReclaimReason.LEASE_HELD,
        ),  # a heartbeat from the future proves nothing
        (
            LeaseLookup.HELD,
            holder(HolderStatus.UNKNOWN, None),
            ReclaimAction.SKIP,
            ReclaimReason.HOLDER_UNKNOWN,
        ),  # row 5
        (LeaseLookup.UNKNOWN, None, ReclaimAction.SKIP, ReclaimReason.LEASE_UNKNOWN),  # row 6
    ],
    ids=[
        "row1-free",
        "row2-no-liveness",
        "row2-not-looked-up",
        "row3-live",
        "row3-at-the-limit",
        "row4-stale",
        "row4-absent",
        "row4-stopped",
        "future-heartbeat",
        "row5-unknown",
        "row6-lookup-failed",
    ],
)
def test_a_reclaimed_carrier_runs_when_nobody_holds_its_lease_or_its_holder_is_dead(
    lease: LeaseLookup,
    liveness: HolderLiveness | None,
    action: ReclaimAction,
    reason: ReclaimReason,
) -> None:
    decision = decide_reclaimed(lease, liveness)
    assert (decision.action, decision.reason) == (action, reason)
    assert decision.runs is (action is not ReclaimAction.SKIP)


def test_every_reason_has_a_row() -> None:
    """The table is total: every reason is reachable."""
    reasons = {decide_reclaimed(lease).reason for lease in LeaseLookup} | {
        decide_reclaimed(LeaseLookup.HELD, holder(status)).reason for status in HolderStatus
    }
    assert reasons | {ReclaimReason.HOLDER_DEAD} == set(ReclaimReason)


def test_the_default_lease_calls_a_heartbeat_stale_after_four_seconds() -> None:
    """P6: a beat every 2 s whatever the TTL; two missed beats say the holder is gone."""
    assert heartbeat_interval_seconds(120) == 2.0 and STALE == 4.0
    assert heartbeat_interval_seconds(3) == 1.0 and stale_heartbeat_seconds(3) == 2.0


@given(
    status=st.sampled_from([HolderStatus.STARTING, HolderStatus.RUNNING, HolderStatus.DRAINING]),
    age=st.floats(min_value=-3600, max_value=STALE),
)
def test_a_holder_with_a_fresh_heartbeat_is_never_taken_over(
    status: HolderStatus, age: float
) -> None:
    """W3: a live holder keeps its execution; only a takeover's new generation fences it."""
    decision = decide_reclaimed(LeaseLookup.HELD, holder(status, age))
    assert decision.action is ReclaimAction.SKIP
