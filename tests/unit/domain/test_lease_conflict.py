"""The lease-conflict table: ack a carrier only when that can never strand an execution (W5, I0).

Incidents (docs/incidents.md): #50, #52, #53, A46-04/A47-F2, B65-03, S18-02A. W5 wins where
the old system acked on an unknown liveness signal.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.lease_conflict import (
    CHILD_DEFER_MS,
    DECISION_CARRIERS,
    ConflictCarrier,
    ConflictDecision,
    ConflictReason,
    HolderStatus,
    conflict_carrier,
    decide_conflict,
    holder_status,
)

C = ConflictCarrier
H = HolderStatus
TTL = 120.0
NOT_RUNNING = [H.STARTING, H.DRAINING, H.STOPPING, H.STOPPED]
DECIDING = sorted(DECISION_CARRIERS)
NO_ADVANCE = [C.CONTINUE, C.RETRY]


def decide(**overrides: Any) -> ConflictDecision:
    """A first-delivery continue against a live, registered holder, unless overridden."""
    facts: dict[str, Any] = {
        "carrier": C.CONTINUE,
        "reclaimed": False,
        "holder": H.RUNNING,
        "heartbeat_age_seconds": 5.0,
        "lease_ttl_seconds": TTL,
        "registry_enabled": True,
        "holder_liveness_disabled": False,
    }
    facts.update(overrides)
    return decide_conflict(**facts)


def leaves(decision: ConflictDecision, reason: ConflictReason) -> None:
    assert decision == ConflictDecision(ack=False, warn_no_effect=False, reason=reason)


# --- one test per row ------------------------------------------------------------------


@pytest.mark.parametrize("carrier", list(C))
def test_a_reclaimed_carrier_is_left_pending_even_against_a_live_holder(carrier: C) -> None:
    """W5 / I0, #50: it may be a dead holder's only carrier; it waits for the lease to expire."""
    leaves(decide(carrier=carrier, reclaimed=True), ConflictReason.RECLAIMED_CARRIER)


def test_a_reclaimed_carrier_is_left_pending_even_with_the_liveness_check_disabled() -> None:
    """W5 / I0: PLAITA_DISABLE_HOLDER_LIVENESS restores the ack of duplicates, never of a
    carrier taken from another consumer (#50)."""
    decision = decide(reclaimed=True, holder_liveness_disabled=True, holder=H.ABSENT)

    leaves(decision, ConflictReason.RECLAIMED_CARRIER)


@pytest.mark.parametrize("carrier", [*NO_ADVANCE, *DECIDING])
def test_with_the_liveness_check_disabled_a_first_delivery_resume_is_acked_with_a_warning(
    carrier: C,
) -> None:
    """W5: PLAITA_DISABLE_HOLDER_LIVENESS=1 is the legacy unconditional ack (a bypass of it all),
    whatever the holder and the registry say."""
    decision = decide(
        carrier=carrier, holder_liveness_disabled=True, holder=H.ABSENT, registry_enabled=False
    )

    assert decision == ConflictDecision(True, True, ConflictReason.LIVENESS_CHECK_DISABLED)


def test_with_the_liveness_check_disabled_a_duplicate_start_is_acked_quietly() -> None:
    """W5, #23: a start that met the lease is a duplicate start, not a resume without effect."""
    decision = decide(carrier=C.START, holder_liveness_disabled=True, holder=H.UNKNOWN)

    assert decision == ConflictDecision(True, False, ConflictReason.LIVENESS_CHECK_DISABLED)


@pytest.mark.parametrize("carrier", DECIDING)
def test_an_event_timeout_or_cancel_carrier_is_left_pending_against_a_live_holder(
    carrier: C,
) -> None:
    """W5, A46-04/A47-F2, #33: in the suspend window it is the execution's only wake-up."""
    leaves(decide(carrier=carrier), ConflictReason.DECISION_CARRIER)


@pytest.mark.parametrize("carrier", [C.START, *NO_ADVANCE])
def test_with_the_registry_disabled_nothing_is_acked(carrier: C) -> None:
    """W5, B65-03: without a registry a frozen holder looks alive; acking strands the run."""
    leaves(decide(carrier=carrier, registry_enabled=False), ConflictReason.REGISTRY_DISABLED)


@pytest.mark.parametrize("carrier", NO_ADVANCE)
def test_a_continue_or_retry_against_a_live_holder_is_acked_with_a_no_effect_warning(
    carrier: C,
) -> None:
    """W5, #50/#52/#53: the live holder keeps its own carrier; leaving the duplicate pending
    would burn deliveries into a false dead letter, and the operator must see it did nothing."""
    assert decide(carrier=carrier) == ConflictDecision(True, True, ConflictReason.HOLDER_ALIVE)


def test_a_duplicate_start_against_a_live_holder_is_acked_without_a_warning() -> None:
    """W5, #23: the start's execution is already being advanced by its holder."""
    decision = decide(carrier=C.START)

    assert decision == ConflictDecision(True, False, ConflictReason.HOLDER_ALIVE)


def test_a_running_holder_with_a_heartbeat_older_than_one_ttl_is_not_taken_for_alive() -> None:
    """W5: "provably alive" is running *and* a heartbeat fresher than one lease TTL (#50)."""
    decision = decide(heartbeat_age_seconds=TTL + 1)

    leaves(decision, ConflictReason.HOLDER_HEARTBEAT_STALE)


def test_a_heartbeat_exactly_one_ttl_old_is_stale() -> None:
    """W5: fresher than one TTL means strictly younger."""
    leaves(decide(heartbeat_age_seconds=TTL), ConflictReason.HOLDER_HEARTBEAT_STALE)


def test_a_running_holder_without_any_heartbeat_is_not_taken_for_alive() -> None:
    """W5: no heartbeat, no proof."""
    leaves(decide(heartbeat_age_seconds=None), ConflictReason.HOLDER_HEARTBEAT_STALE)


def test_a_heartbeat_from_the_future_is_not_taken_for_alive() -> None:
    """W5: clock skew; a dead holder ahead of our clock would look alive for its skew."""
    leaves(decide(heartbeat_age_seconds=-1.0), ConflictReason.HOLDER_HEARTBEAT_STALE)


@pytest.mark.parametrize("holder", NOT_RUNNING)
def test_a_holder_that_is_starting_draining_stopping_or_stopped_is_not_trusted(
    holder: H,
) -> None:
    """W5, W16, S18-02A: these statuses do not promise to finish the step."""
    leaves(decide(holder=holder), ConflictReason.HOLDER_NOT_RUNNING)


def test_a_holder_missing_from_the_registry_is_taken_for_dead() -> None:
    """W5, #50: the lease key is the tail of a dead holder's TTL; wait for it to expire."""
    leaves(decide(holder=H.ABSENT), ConflictReason.HOLDER_ABSENT)


def test_an_unknown_holder_liveness_leaves_the_carrier_pending() -> None:
    """W5 overrides the old degrade-to-ack (old lease format, Redis blip): only a provably
    alive holder justifies the ack (B65-03's reasoning)."""
    leaves(decide(holder=H.UNKNOWN), ConflictReason.HOLDER_LIVENESS_UNKNOWN)


# --- reading the inputs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (None, H.ABSENT),
        ("running", H.RUNNING),
        ("starting", H.STARTING),
        ("draining", H.DRAINING),
        ("stopping", H.STOPPING),
        ("stopped", H.STOPPED),
        ("closed", H.STOPPED),
        ("paused", H.UNKNOWN),
        ("", H.UNKNOWN),
        ("RUNNING", H.UNKNOWN),
    ],
)
def test_the_registry_status_string_maps_to_a_holder_status(raw: str | None, status: H) -> None:
    """W16, S18-02A: a missing key is a dead holder, an unknown value is never alive."""
    assert holder_status(raw) is status


def test_a_start_envelope_is_a_start_carrier() -> None:
    envelope = TaskEnvelope.start(
        execution_id="x",
        flow_id="f",
        version=None,
        params={},
        now_ms=0,
        generations=LEGACY_GENERATIONS,
    )

    assert conflict_carrier(envelope) is C.START


@pytest.mark.parametrize("resume_type", list(ResumeType))
def test_a_resume_envelope_is_the_carrier_of_its_resume_type(resume_type: ResumeType) -> None:
    envelope = TaskEnvelope.resume(
        execution_id="x",
        flow_id="f",
        resume_type=resume_type,
        now_ms=0,
        generations=LEGACY_GENERATIONS,
    )

    assert conflict_carrier(envelope).value == resume_type.value


# --- properties over every combination -------------------------------------------------

facts = st.fixed_dictionaries(
    {
        "carrier": st.sampled_from(C),
        "reclaimed": st.booleans(),
        "holder": st.sampled_from(H),
        "heartbeat_age_seconds": st.none() | st.floats(allow_nan=False),
        "lease_ttl_seconds": st.floats(min_value=0, max_value=1e6),
        "registry_enabled": st.booleans(),
        "holder_liveness_disabled": st.booleans(),
    }
)


@given(facts)
def test_the_conflict_table_is_total_and_warns_only_about_acked_resumes(
    inputs: dict[str, Any],
) -> None:
    """W5: every combination gets a decision; the WARNING goes with a resume acked without a
    copy only (a child's deferred notice has its copy)."""
    decision = decide_conflict(**inputs)

    assert isinstance(decision.reason, ConflictReason)
    assert decision.warn_no_effect == (
        decision.ack and decision.defer_ms is None and inputs["carrier"] is not C.START
    )


@given(facts)
def test_a_reclaimed_carrier_is_never_acked(inputs: dict[str, Any]) -> None:
    """W5 / I0 (#50/#52): it may be a dead holder's only carrier."""
    inputs["reclaimed"] = True

    assert not decide_conflict(**inputs).ack


@given(facts)
def test_event_timeout_and_cancel_are_never_acked_unless_liveness_is_disabled(
    inputs: dict[str, Any],
) -> None:
    """W5, A46-04/A47-F2: decision carriers are the suspended execution's only wake-up."""
    decision = decide_conflict(**inputs)

    if inputs["carrier"] in DECISION_CARRIERS and decision.ack:
        assert inputs["holder_liveness_disabled"]


@given(facts)
def test_an_ack_needs_a_provably_alive_holder_or_the_legacy_switch(
    inputs: dict[str, Any],
) -> None:
    """W5: first delivery, registry on, running, heartbeat fresher than one TTL — or
    PLAITA_DISABLE_HOLDER_LIVENESS=1 (B65-03, #50)."""
    decision = decide_conflict(**inputs)
    if decision.defer_ms is not None:  # acked with its copy on the delay queue (E13, E14)
        assert inputs["carrier"] is C.CHILD and not inputs["reclaimed"]
        return
    age = inputs["heartbeat_age_seconds"]
    alive = (
        inputs["registry_enabled"]
        and inputs["holder"] is H.RUNNING
        and age is not None
        and 0 <= age < inputs["lease_ttl_seconds"]
        and inputs["carrier"] not in DECISION_CARRIERS
    )

    assert decision.ack == (
        not inputs["reclaimed"] and (inputs["holder_liveness_disabled"] or alive)
    )


@pytest.mark.parametrize("holder", [H.RUNNING, H.ABSENT, H.UNKNOWN, H.STOPPED])
def test_a_childs_end_notice_is_deferred_with_a_copy_whatever_the_holder(holder: H) -> None:
    """E13, E14: a child's notice that meets its parent's lease is acked only with a copy
    on the delay queue (the replacement exists first: I0), so a map's children ending by
    the dozen never wait for the claim idle; the parent reads the child's own state then."""
    decision = decide(carrier=C.CHILD, holder=holder, registry_enabled=False)

    assert decision == ConflictDecision(
        True, False, ConflictReason.CHILD_DEFERRED, defer_ms=CHILD_DEFER_MS
    )
    assert C.CHILD not in DECISION_CARRIERS


def test_a_reclaimed_childs_notice_is_left_pending_like_any_reclaimed_carrier() -> None:
    leaves(decide(carrier=C.CHILD, reclaimed=True), ConflictReason.RECLAIMED_CARRIER)
