"""The start policy: one test per row of the W6 tables in ``plaita.domain.dedup``, then
properties. Incident #91 (docs/incidents.md) is the redelivered start that replayed its
execution from the first node."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.dedup import (
    DEDUP_ORPHAN_GRACE_MS,
    DEDUP_TTL_MS,
    DedupHolder,
    HolderCarrier,
    StartDecision,
    StartKind,
    StartRequest,
    StoredExecution,
    decide_dedup_claim,
    decide_start,
    dedup_claim_key,
)
from plaita.domain.errors import ExecutionIdConflictError, InvalidDedupKeyError
from plaita.domain.execution import TERMINAL_STATUSES, ExecutionStatus

RUNNING = ExecutionStatus.RUNNING
SUSPENDED = ExecutionStatus.SUSPENDED

START = StartRequest(execution_id="x-new", flow_id="approval")
KEYED = StartRequest(execution_id="x-new", flow_id="approval", dedup_key="order:7")


def holder(
    status: ExecutionStatus | None,
    *,
    execution_id: str = "x-old",
    carrier: HolderCarrier = HolderCarrier.UNKNOWN,
    claim_age_ms: int | None = None,
) -> DedupHolder:
    stored = None if status is None else StoredExecution("approval", status)
    return DedupHolder(execution_id, stored, carrier, claim_age_ms)


# --- the key ---------------------------------------------------------------------------


def test_a_dedup_key_is_scoped_by_tenant_and_kept_seven_days() -> None:
    """W6, W24: two tenants may use the same key; the claim lives 7 days."""
    assert dedup_claim_key("acme", "order:7") == "dedup:{acme}:order:7"
    assert dedup_claim_key("acme", "k") != dedup_claim_key("globex", "k")
    assert DEDUP_TTL_MS == 7 * 24 * 3600 * 1000


@pytest.mark.parametrize(("tenant", "key"), [("acme", ""), ("", "order:7")])
def test_an_empty_dedup_key_or_tenant_is_rejected_by_name(tenant: str, key: str) -> None:
    """W6, W21: an empty key would deduplicate unrelated starts; no tenant fails closed (W24)."""
    with pytest.raises(InvalidDedupKeyError):
        dedup_claim_key(tenant, key)


def test_a_start_request_with_an_empty_dedup_key_cannot_be_built() -> None:
    with pytest.raises(InvalidDedupKeyError):
        StartRequest(execution_id="x", flow_id="approval", dedup_key="")


# --- decide_start: S1-S4 ---------------------------------------------------------------


def test_a_start_without_a_row_or_dedup_key_is_a_new_start() -> None:
    """S1 (W6): without a key the behaviour is the plain start."""
    decision = decide_start(START, None)

    assert decision == StartDecision(StartKind.NEW_START, "x-new", decision.detail)
    assert not decision.ack


def test_a_start_with_a_dedup_key_claims_it_before_any_row_is_written() -> None:
    """S2 (W6: SET NX before the first row is written)."""
    decision = decide_start(KEYED, None)

    assert decision.kind is StartKind.CLAIM_DEDUP_KEY and not decision.ack


def test_a_start_reusing_the_id_of_another_flows_execution_is_an_id_conflict() -> None:
    """S3 (W6: an id that belongs to another flow): state untouched, the carrier acked as
    poison."""
    decision = decide_start(KEYED, StoredExecution("invoice", RUNNING))

    assert decision.kind is StartKind.ID_CONFLICT
    assert decision.ack and decision.poison
    assert isinstance(decision.error, ExecutionIdConflictError)
    assert "'invoice'" in str(decision.error) and "'approval'" in str(decision.error)


@pytest.mark.parametrize("status", list(ExecutionStatus))
def test_a_redelivered_start_whose_row_exists_resumes_from_the_checkpoint(
    status: ExecutionStatus,
) -> None:
    """S4 (W6, #91): no replay from the first node; decide_resume takes it on."""
    decision = decide_start(START, StoredExecution("approval", status))

    assert decision.kind is StartKind.RESUME_CONTINUE
    assert decision.execution_id == "x-new" and not decision.ack


# --- decide_dedup_claim: D1-D10 -----------------------------------------------------------


def test_a_key_claimed_now_is_a_new_start() -> None:
    """D1 (W6)."""
    assert decide_dedup_claim(KEYED, None).kind is StartKind.NEW_START


def test_a_key_already_held_by_this_execution_without_a_row_is_a_new_start() -> None:
    """D2 (W6): our own claim survived a crash before the first row was written."""
    decision = decide_dedup_claim(KEYED, holder(None, execution_id="x-new"))

    assert decision.kind is StartKind.NEW_START


@pytest.mark.parametrize(
    ("stored", "kind"),
    [
        (StoredExecution("approval", SUSPENDED), StartKind.RESUME_CONTINUE),
        (StoredExecution("invoice", RUNNING), StartKind.ID_CONFLICT),
    ],
)
def test_a_key_held_by_this_execution_with_a_row_is_decided_as_a_redelivered_start(
    stored: StoredExecution, kind: StartKind
) -> None:
    """D3 (W6): the same rules as S3/S4, so a racing row never skips the flow check."""
    decision = decide_dedup_claim(KEYED, DedupHolder("x-new", stored))

    assert decision.kind is kind


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES))
def test_a_hit_on_a_terminal_execution_returns_already_and_starts_nothing(
    status: ExecutionStatus,
) -> None:
    """D4 (W6: terminal → the "already" result)."""
    decision = decide_dedup_claim(KEYED, holder(status))

    assert decision.kind is StartKind.ALREADY
    assert decision.execution_id == "x-old" and decision.ack


def test_a_hit_on_a_running_execution_enqueues_a_continue_for_it_then_acks() -> None:
    """D5 (W6: running, stranded by a crash → enqueue a resume, then ack the start)."""
    decision = decide_dedup_claim(KEYED, holder(RUNNING))

    assert decision.kind is StartKind.ENQUEUE_CONTINUE
    assert decision.execution_id == "x-old" and decision.ack


def test_a_hit_on_a_pending_execution_is_in_flight_and_enqueues_nothing() -> None:
    """D5a (ADR 0022): accepted, its start carrier queued; a lost one is the reaper's."""
    decision = decide_dedup_claim(KEYED, holder(ExecutionStatus.PENDING))

    assert decision.kind is StartKind.IN_FLIGHT
    assert decision.execution_id == "x-old" and decision.ack


def test_a_hit_on_a_suspended_execution_returns_its_current_state() -> None:
    """D6 (W6): its own event, timer or cancel resumes it; a start must not."""
    decision = decide_dedup_claim(KEYED, holder(SUSPENDED))

    assert decision.kind is StartKind.CURRENT_STATE
    assert decision.execution_id == "x-old" and decision.ack


def test_a_key_held_by_an_execution_whose_start_is_on_its_way_is_in_flight() -> None:
    """D7 (W6): its carrier still exists, so it will write its row; starting again doubles it."""
    decision = decide_dedup_claim(
        KEYED, holder(None, carrier=HolderCarrier.PRESENT, claim_age_ms=10**9)
    )

    assert decision.kind is StartKind.IN_FLIGHT
    assert decision.execution_id == "x-old" and decision.ack


def test_an_orphan_mapping_whose_holder_has_no_carrier_is_released_and_reclaimed() -> None:
    """D8 (W6, an orphan mapping: crash between claim and first row)."""
    decision = decide_dedup_claim(KEYED, holder(None, carrier=HolderCarrier.ABSENT, claim_age_ms=0))

    assert decision.kind is StartKind.RECLAIM
    assert decision.execution_id == "x-old" and not decision.ack


def test_a_mapping_older_than_the_grace_whose_carrier_is_unknown_is_an_orphan() -> None:
    """D9 (W6): a live start would have written its row within claim_min_idle + lease TTL."""
    decision = decide_dedup_claim(KEYED, holder(None, claim_age_ms=DEDUP_ORPHAN_GRACE_MS))

    assert decision.kind is StartKind.RECLAIM


@pytest.mark.parametrize("age", [None, 0, DEDUP_ORPHAN_GRACE_MS - 1])
def test_a_young_or_ageless_mapping_whose_carrier_is_unknown_is_in_flight(age: int | None) -> None:
    """D10 (W6): in doubt, never start twice; a later retry finds the orphan by its age."""
    decision = decide_dedup_claim(KEYED, holder(None, claim_age_ms=age))

    assert decision.kind is StartKind.IN_FLIGHT


def test_the_orphan_grace_can_be_configured() -> None:
    decision = decide_dedup_claim(KEYED, holder(None, claim_age_ms=5), orphan_grace_ms=5)

    assert decision.kind is StartKind.RECLAIM


# --- properties -------------------------------------------------------------------------

ids = st.sampled_from(["x-new", "x-old"])
flows = st.sampled_from(["approval", "invoice"])
stored = st.none() | st.builds(StoredExecution, flows, st.sampled_from(ExecutionStatus))
requests = st.builds(
    StartRequest, ids, flows, st.none() | st.sampled_from(["order:7", "sched:a:due:1"])
)
holders = st.none() | st.builds(
    DedupHolder,
    ids,
    stored,
    st.sampled_from(HolderCarrier),
    st.none() | st.integers(-10, 2 * DEDUP_ORPHAN_GRACE_MS),
)
RUNS_SOMETHING = {StartKind.NEW_START, StartKind.RESUME_CONTINUE}


@given(requests, stored)
def test_decide_start_is_total_and_conflicts_exactly_on_another_flows_row(
    request: StartRequest, row: StoredExecution | None
) -> None:
    """W6: every input gets a decision; the conflict error is named and nothing else raises."""
    decision = decide_start(request, row)

    conflict = row is not None and row.flow_id != request.flow_id
    assert (decision.kind is StartKind.ID_CONFLICT) is conflict
    assert isinstance(decision.error, ExecutionIdConflictError) is conflict
    assert decision.poison is conflict
    if row is not None:
        assert decision.kind is not StartKind.NEW_START


@given(requests, holders, st.integers(0, 2 * DEDUP_ORPHAN_GRACE_MS))
def test_a_hit_never_starts_a_second_execution(
    request: StartRequest, claim: DedupHolder | None, grace: int
) -> None:
    """W6: "a hit never starts twice" — only a free key or our own claim starts a run."""
    decision = decide_dedup_claim(request, claim, orphan_grace_ms=grace)

    assert isinstance(decision.kind, StartKind)
    mine = claim is None or claim.execution_id == request.execution_id
    if not mine:
        assert claim is not None
        assert decision.kind not in RUNS_SOMETHING
        assert decision.execution_id == claim.execution_id
    if decision.kind is StartKind.RECLAIM:
        assert claim is not None and claim.stored is None
        assert claim.carrier is not HolderCarrier.PRESENT
    assert decision.ack is (decision.kind not in {*RUNS_SOMETHING, StartKind.RECLAIM})
    assert decision.kind is not StartKind.CLAIM_DEDUP_KEY
