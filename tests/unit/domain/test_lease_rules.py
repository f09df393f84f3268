"""Fenced writes (fence == fencegen == mine) and the lease watchdog's decisions (W3, W4).

The watchdog renews every TTL/3 and fences itself at the step boundary (W3); a write needs
fence and fencegen both equal to the writer's generation (W4, A2R25-04/05).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.lease import (
    LEASE_SAFETY_MARGIN_FRACTION,
    RENEWAL_RETRY_SECONDS,
    RenewalAction,
    RenewalOutcome,
    WriteVerdict,
    check_fenced_write,
    decide_renewal,
    fenced_write_allowed,
    judge_write,
    lease_safety_margin_seconds,
    renewal_interval_seconds,
)

generations = st.integers(min_value=0, max_value=2**63 - 1)
maybe_generations = st.none() | generations
ttls = st.floats(min_value=0.01, max_value=86_400, allow_nan=False)
instants = st.floats(min_value=0, max_value=1e6, allow_nan=False)

TTL = 120.0  # --lease-ttl-seconds default (W3)
FENCE_AT = TTL * (1 - LEASE_SAFETY_MARGIN_FRACTION)  # 108 s after the last renewal


# --- fenced writes: one test per row --------------------------------------------------------


def test_a_write_under_fence_equal_to_fencegen_and_recorded_fence_is_allowed() -> None:
    """W4: fence == fencegen == mine is the only accepted write."""
    assert judge_write(7, fencegen=7, recorded_fence=7) is WriteVerdict.ALLOWED
    assert fenced_write_allowed(7, 7, 7)
    check_fenced_write("x", 7, 7, 7)


def test_a_write_before_any_acquisition_is_rejected() -> None:
    """W4: with no generation ever handed out nobody holds a right to write."""
    assert judge_write(1, fencegen=None, recorded_fence=1) is WriteVerdict.NO_GENERATION


def test_a_write_after_a_newer_acquisition_is_rejected_as_superseded() -> None:
    """W4 / R3: a holder SIGSTOPped past its lease comes back with fence 4 after a takeover at 5."""
    assert judge_write(4, fencegen=5, recorded_fence=5) is WriteVerdict.SUPERSEDED


def test_a_write_when_the_counter_fell_below_the_fence_is_rejected() -> None:
    """W4: the counter is never reset, so a lower counter means the store was rolled back."""
    assert judge_write(5, fencegen=4, recorded_fence=4) is WriteVerdict.COUNTER_REWOUND


def test_a_write_after_the_fence_was_revoked_is_rejected() -> None:
    """W13: delete removes the fence and keeps the counter; a late write must not revive it."""
    assert judge_write(5, fencegen=5, recorded_fence=None) is WriteVerdict.REVOKED


def test_a_write_after_state_and_fence_were_restored_from_a_backup_is_rejected() -> None:
    """W4, A2R25-04/05: only the old state and fence were restored, fencegen moved on."""
    assert judge_write(5, fencegen=5, recorded_fence=3) is WriteVerdict.FENCE_MISMATCH


@given(mine=generations, fencegen=maybe_generations, recorded=maybe_generations)
def test_a_write_is_allowed_exactly_when_all_three_generations_agree(
    mine: int, fencegen: int | None, recorded: int | None
) -> None:
    """W4: judge_write is total, and ALLOWED ⇔ fence == fencegen == mine."""
    verdict = judge_write(mine, fencegen, recorded)

    assert isinstance(verdict, WriteVerdict)
    assert (verdict is WriteVerdict.ALLOWED) == (mine == fencegen == recorded)
    assert fenced_write_allowed(mine, fencegen, recorded) == (verdict is WriteVerdict.ALLOWED)


def test_a_rejected_fenced_write_raises_execution_lease_error_naming_the_reason() -> None:
    """W4: store adapters raise ExecutionLeaseError; the message says which rule failed."""
    with pytest.raises(ExecutionLeaseError, match=r"x-42.*fence 4.*superseded"):
        check_fenced_write("x-42", 4, 5, 5)


# --- the watchdog's safety margin ------------------------------------------------------


def test_the_safety_margin_is_a_tenth_of_the_ttl() -> None:
    """W3: the holder stops 12 s before a 120 s lease could run out on the server."""
    assert lease_safety_margin_seconds(TTL) == pytest.approx(12.0)


def test_the_safety_margin_leaves_room_for_two_renewals_before_self_fencing() -> None:
    """W3: renewals run at TTL/3 and 2·TTL/3; both come before TTL - margin."""
    assert 2 * renewal_interval_seconds(TTL) < TTL - lease_safety_margin_seconds(TTL)


# --- the watchdog's decisions: one test per row ----------------------------------------


def test_a_successful_renewal_keeps_going_from_the_moment_it_was_sent() -> None:
    """W3: the server restarted the TTL after we sent the call; the lease runs from there."""
    decision = decide_renewal(
        ttl_seconds=TTL, last_renewed_at=0, sent_at=40, now=40.5, outcome=RenewalOutcome.RENEWED
    )

    assert decision.action is RenewalAction.KEEP_GOING
    assert decision.last_renewed_at == 40
    assert decision.fence_at == pytest.approx(40 + FENCE_AT)
    assert decision.next_attempt_in == pytest.approx(1.5)  # every 2 s, from when it was sent
    assert decision.refresh_liveness


def test_a_renewal_that_took_longer_than_the_interval_is_followed_at_once() -> None:
    """W3: the next attempt is due one interval after the last one was sent, not after it
    returned."""
    decision = decide_renewal(
        ttl_seconds=TTL, last_renewed_at=0, sent_at=40, now=90, outcome=RenewalOutcome.RENEWED
    )

    assert decision.action is RenewalAction.KEEP_GOING
    assert decision.next_attempt_in == 0


def test_a_renewal_answered_after_its_own_safe_window_fences_the_holder() -> None:
    """W3: the lease it extended may already have run out; nothing proves it is still ours."""
    decision = decide_renewal(
        ttl_seconds=TTL,
        last_renewed_at=0,
        sent_at=40,
        now=40 + FENCE_AT,
        outcome=RenewalOutcome.RENEWED,
    )

    assert decision.action is RenewalAction.SELF_FENCE
    assert not decision.refresh_liveness


def test_a_lost_lease_fences_the_holder_at_once() -> None:
    """W3: another worker took over; stop writing now."""
    decision = decide_renewal(
        ttl_seconds=TTL, last_renewed_at=39, sent_at=40, now=40, outcome=RenewalOutcome.LOST
    )

    assert decision.action is RenewalAction.SELF_FENCE
    assert decision.next_attempt_in == 0
    assert decision.last_renewed_at == 39
    assert not decision.refresh_liveness


def test_a_failed_renewal_inside_the_safe_window_is_retried_within_a_second() -> None:
    """W3: a store outage shorter than the TTL must not fence a healthy holder."""
    decision = decide_renewal(
        ttl_seconds=TTL, last_renewed_at=0, sent_at=40, now=41, outcome=RenewalOutcome.FAILED
    )

    assert decision.action is RenewalAction.RETRY_SOON
    assert decision.next_attempt_in == RENEWAL_RETRY_SECONDS
    assert decision.last_renewed_at == 0
    assert decision.fence_at == pytest.approx(FENCE_AT)
    assert not decision.refresh_liveness


def test_a_retry_is_never_scheduled_after_the_moment_the_holder_must_fence() -> None:
    """W3: the last retry lands on the deadline, where a failure fences the holder."""
    decision = decide_renewal(
        ttl_seconds=TTL,
        last_renewed_at=0,
        sent_at=FENCE_AT - 1,
        now=FENCE_AT - 0.25,
        outcome=RenewalOutcome.FAILED,
    )

    assert decision.action is RenewalAction.RETRY_SOON
    assert decision.next_attempt_in == pytest.approx(0.25)


def test_a_failed_renewal_at_ttl_minus_margin_fences_the_holder() -> None:
    """W3: the lease may expire on the server before our clock says so; stop at TTL - margin."""
    decision = decide_renewal(
        ttl_seconds=TTL,
        last_renewed_at=0,
        sent_at=FENCE_AT - 2,
        now=FENCE_AT,
        outcome=RenewalOutcome.FAILED,
    )

    assert decision.action is RenewalAction.SELF_FENCE


def test_an_explicit_margin_replaces_the_default() -> None:
    """W3: a deployment may give up a larger share of the TTL."""
    decision = decide_renewal(
        ttl_seconds=TTL,
        last_renewed_at=0,
        sent_at=80,
        now=81,
        outcome=RenewalOutcome.FAILED,
        margin_seconds=40,
    )

    assert decision.action is RenewalAction.SELF_FENCE
    assert decision.fence_at == 80


# --- properties ------------------------------------------------------------------------


@given(
    ttl=ttls,
    last=instants,
    sent_after=st.floats(min_value=0, max_value=1e5),
    took=st.floats(min_value=0, max_value=1e5),
    outcome=st.sampled_from(RenewalOutcome),
)
def test_no_decision_lets_the_holder_write_past_ttl_minus_margin_of_its_lease(
    ttl: float, last: float, sent_after: float, took: float, outcome: RenewalOutcome
) -> None:
    """W3: total over all outcomes; whatever it answers, a holder that goes on does so only
    while the lease it can prove (from the last send that succeeded) has a margin left."""
    sent = last + sent_after
    now = sent + took
    decision = decide_renewal(
        ttl_seconds=ttl, last_renewed_at=last, sent_at=sent, now=now, outcome=outcome
    )

    proven_from = sent if outcome is RenewalOutcome.RENEWED else last
    assert decision.last_renewed_at == proven_from
    assert decision.fence_at == pytest.approx(proven_from + ttl - lease_safety_margin_seconds(ttl))
    if decision.action is not RenewalAction.SELF_FENCE:
        assert now < decision.fence_at
        assert 0 <= decision.next_attempt_in <= max(RENEWAL_RETRY_SECONDS, ttl / 3)
        due = max(decision.fence_at, proven_from + ttl / 3)
        assert (
            now + decision.next_attempt_in == pytest.approx(due)
            or now + decision.next_attempt_in < due
        )
    if outcome is RenewalOutcome.LOST:
        assert decision.action is RenewalAction.SELF_FENCE
    assert decision.refresh_liveness == (decision.action is RenewalAction.KEEP_GOING)


@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_a_watchdog_driven_by_its_decisions_fences_itself_before_the_server_lease_ends(
    answers: list[bool],
) -> None:
    """W3, R3 (SIGSTOP past the lease): replaying the watchdog loop against a server whose
    lease runs TTL from when it executed each renewal, the holder is never still going once
    the server's lease ended, and an outage longer than TTL - margin always fences it."""
    ttl, latency = 120.0, 0.5
    last = clock = 0.0
    server_expiry = ttl
    for renewed in answers:
        sent = clock
        clock += latency
        if renewed and sent + latency / 2 < server_expiry:
            server_expiry = sent + latency / 2 + ttl  # the call ran half-way through
            outcome = RenewalOutcome.RENEWED
        else:
            outcome = RenewalOutcome.LOST if renewed else RenewalOutcome.FAILED
        decision = decide_renewal(
            ttl_seconds=ttl, last_renewed_at=last, sent_at=sent, now=clock, outcome=outcome
        )
        if decision.action is RenewalAction.SELF_FENCE:
            assert outcome is RenewalOutcome.LOST or clock >= last + ttl * 0.9 - 1e-6
            return
        assert clock + lease_safety_margin_seconds(ttl) <= server_expiry
        last = decision.last_renewed_at
        clock += decision.next_attempt_in
    assert clock <= last + ttl
