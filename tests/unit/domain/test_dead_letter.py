"""Dead letters: the guard (W9), replay (W10) and the DLQ cap.

Incidents (docs/incidents.md): #242 (the guard's table), #252 (every path to the DLQ goes
through the one guard and leaves evidence), A49-01 (a schema-rejected carrier gets no recovery
copy) and A53-S2 (the replay contract).
"""

from __future__ import annotations

import itertools
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.dead_letter import (
    DLQ_TRIMMED_METRIC,
    REPLAY_MARKER_TTL_SECONDS,
    REPLAY_NAMESPACE,
    DlqEntry,
    ExecutionLookup,
    GuardAction,
    LeaseLookup,
    ReplayDecision,
    ReplayOutcome,
    dead_letter_fields,
    decide_replay,
    dlq_overflow,
    guard_dead_letter,
    replay_execution_id,
    replay_timestamp_ms,
    target_execution_id,
)
from plaita.domain.envelope import CURRENT_SCHEMA_VERSION, CarrierKind, ResumeType
from plaita.domain.execution import ExecutionStatus
from plaita.domain.tombstone import Tombstone

E = ExecutionLookup
L = LeaseLookup


def guard(
    execution: ExecutionLookup,
    lease: LeaseLookup,
    *,
    exhausted: bool = False,
    schema_rejected: bool = False,
) -> GuardAction:
    return guard_dead_letter(
        execution=execution,
        lease=lease,
        node_budget_exhausted=exhausted,
        schema_rejected=schema_rejected,
    ).action


# --- the guard (W9) -------------------------------------------------------------------


def test_a_terminal_executions_carrier_is_released() -> None:
    """W9, #242: a terminal execution needs no carrier; it is released at once."""
    assert guard(E.TERMINAL, L.UNKNOWN, exhausted=True) is GuardAction.RELEASE


def test_a_carrier_whose_lease_is_held_stays_pending() -> None:
    """W9, #242: a live worker is on a long step; dead-lettering would lose its carrier."""
    assert guard(E.NON_TERMINAL, L.HELD) is GuardAction.KEEP_PENDING


def test_a_spent_node_budget_is_made_terminal_before_the_release() -> None:
    """W9, #242: a recovery copy would start at delivery 1 and spend it again, for ever."""
    assert guard(E.NON_TERMINAL, L.FREE, exhausted=True) is GuardAction.TERMINALISE_THEN_RELEASE


def test_a_failed_state_lookup_keeps_the_carrier_pending() -> None:
    """W9, #242/#252: a failed lease or state lookup is just as conservative: it skips."""
    assert guard(E.FAILED, L.FREE) is GuardAction.KEEP_PENDING


def test_a_failed_lease_lookup_keeps_the_carrier_pending() -> None:
    """W9, #242: an unknown lease may be a live holder's."""
    assert guard(E.NON_TERMINAL, L.UNKNOWN) is GuardAction.KEEP_PENDING


def test_a_non_terminal_execution_without_a_lease_gets_a_recovery_copy_first() -> None:
    """W9/I0, #242: non-terminal and no lease (the holder died): a recovery copy, then release."""
    assert guard(E.NON_TERMINAL, L.FREE) is GuardAction.ENQUEUE_COPY_THEN_RELEASE


def test_a_schema_rejected_carrier_is_released_once_without_a_copy() -> None:
    """W9/W11, A49-01: a copy keeps the same version (A44-02) and would be rejected
    again, one DLQ entry per round; the execution is left as it is."""
    assert guard(E.NON_TERMINAL, L.FREE, schema_rejected=True) is GuardAction.RELEASE_ONCE_NO_COPY
    assert guard(E.MISSING, L.FREE, schema_rejected=True) is GuardAction.RELEASE_ONCE_NO_COPY


def test_a_schema_rejected_carrier_stays_pending_while_the_lease_is_held() -> None:
    """W9, A49-01: a held lease still refuses the dead letter; it waits pending for a new build."""
    assert guard(E.NON_TERMINAL, L.HELD, schema_rejected=True) is GuardAction.KEEP_PENDING


def test_a_carrier_of_a_missing_execution_is_released() -> None:
    """W9/W2: nothing to recover (a start that never persisted, a deleted execution)."""
    assert guard(E.MISSING, L.FREE, exhausted=True) is GuardAction.RELEASE


def test_a_carrier_of_a_missing_execution_stays_pending_while_a_lease_is_held() -> None:
    """W9: a start holding its lease may be about to write the first state row."""
    assert guard(E.MISSING, L.HELD) is GuardAction.KEEP_PENDING


@pytest.mark.parametrize(
    ("execution", "lease", "exhausted", "schema_rejected"),
    list(itertools.product(E, L, [False, True], [False, True])),
)
def test_the_guard_never_drops_the_only_carrier_of_a_live_execution(
    execution: ExecutionLookup, lease: LeaseLookup, exhausted: bool, schema_rejected: bool
) -> None:
    """W9/I0 over every input: a non-terminal execution's carrier leaves only after a copy or
    a terminal write, or once for a schema rejection; an unknown or held lease always keeps."""
    decision = guard_dead_letter(
        execution=execution,
        lease=lease,
        node_budget_exhausted=exhausted,
        schema_rejected=schema_rejected,
    )

    assert decision.reason
    assert decision.releases is (decision.action is not GuardAction.KEEP_PENDING)
    if execution is E.TERMINAL:
        assert decision.action is GuardAction.RELEASE
    elif execution is E.FAILED or lease is not L.FREE:
        assert decision.action is GuardAction.KEEP_PENDING
    if execution is E.NON_TERMINAL and decision.releases:
        assert decision.action is not GuardAction.RELEASE
    if schema_rejected:
        assert decision.action is not GuardAction.ENQUEUE_COPY_THEN_RELEASE


# --- evidence (W9, W11, R4) ----------------------------------------------------------------


def test_a_dead_letter_records_reason_time_and_schema_version() -> None:
    """W9/W11, #252: a DLQ entry always carries schema_version."""
    fields = dead_letter_fields(
        reason="max_deliveries", fields={"schema_version": "1"}, malformed=False, now_ms=42
    )

    assert fields == {"reason": "max_deliveries", "schema_version": "1", "dead_lettered_at": "42"}


def test_a_carrier_without_a_schema_version_is_recorded_as_v1() -> None:
    """W11, A53-S2: missing means v1."""
    fields = dead_letter_fields(reason="r", fields={}, malformed=False, now_ms=0)

    assert fields["schema_version"] == str(CURRENT_SCHEMA_VERSION)


def test_a_malformed_carrier_keeps_its_raw_fields_as_evidence() -> None:
    """W9/R4, #252: a malformed carrier also keeps its raw_fields."""
    raw = {"envelope": "{not json", "schema_version": "1"}
    fields = dead_letter_fields(reason="malformed", fields=raw, malformed=True, now_ms=0)

    assert json.loads(fields["raw_fields"]) == raw


def test_an_unreadable_schema_version_is_kept_verbatim_with_the_raw_fields() -> None:
    """W11, #252: audit and replay never depend on a guess."""
    raw = {"schema_version": "v2"}
    fields = dead_letter_fields(reason="r", fields=raw, malformed=False, now_ms=0)

    assert fields["schema_version"] == "v2"
    assert json.loads(fields["raw_fields"]) == raw


# --- DLQ cap (W10) ------------------------------------------------------------------------


def test_a_dlq_within_its_cap_loses_nothing() -> None:
    assert dlq_overflow(10, 10) == 0


def test_a_dlq_over_its_cap_drops_its_oldest_entries_and_counts_them() -> None:
    """W10, A53-S2: a lossy FIFO, visible in the dlq_trimmed metric."""
    assert dlq_overflow(13, 10) == 3
    assert DLQ_TRIMMED_METRIC == "dlq_trimmed"


def test_a_dlq_cap_of_zero_means_no_cap() -> None:
    assert dlq_overflow(10**6, 0) == 0


@given(length=st.integers(0, 10**6), cap=st.integers(-5, 10**6))
def test_after_trimming_the_dlq_never_exceeds_its_cap(length: int, cap: int) -> None:
    drop = dlq_overflow(length, cap)

    assert 0 <= drop <= length
    assert cap <= 0 or length - drop <= cap


# --- replay (W10) -----------------------------------------------------------------------


def entry(**changes: object) -> DlqEntry:
    base: dict[str, object] = {
        "dlq_key": "plaita:tasks:dlq",
        "dlq_id": "1800000000000-3",
        "kind": CarrierKind.RESUME,
        "execution_id": "x-1",
        "schema_version": 1,
        "tenant_id": "acme",
    }
    base.update(changes)
    return DlqEntry(**base)  # type: ignore[arg-type]


def replay(
    dlq_entry: DlqEntry,
    *,
    marker_set: bool = False,
    tombstone: Tombstone | None = None,
    requested_tenant: str | None = None,
) -> ReplayDecision:
    return decide_replay(
        dlq_entry, marker_set=marker_set, tombstone=tombstone, requested_tenant=requested_tenant
    )


def test_a_resume_entry_is_replayed_under_its_own_id_tenant_and_schema() -> None:
    """W10/W11, A53-S2: schema_version is inherited from the source envelope."""
    decision = replay(entry())

    assert decision == ReplayDecision(ReplayOutcome.REPLAYED, "x-1", "acme", None, 1)


@pytest.mark.parametrize(
    ("status", "kind", "resume_type", "outcome"),
    [
        (
            ExecutionStatus.ERROR,
            CarrierKind.RESUME,
            ResumeType.CONTINUE,
            ReplayOutcome.EXECUTION_ENDED,
        ),
        (ExecutionStatus.ERROR, CarrierKind.START, None, ReplayOutcome.EXECUTION_ENDED),
        (ExecutionStatus.ERROR, CarrierKind.RESUME, ResumeType.RETRY, ReplayOutcome.REPLAYED),
        (
            ExecutionStatus.COMPLETED,
            CarrierKind.RESUME,
            ResumeType.RETRY,
            ReplayOutcome.EXECUTION_ENDED,
        ),
        (
            ExecutionStatus.CANCELLED,
            CarrierKind.RESUME,
            ResumeType.EVENT,
            ReplayOutcome.EXECUTION_ENDED,
        ),
        (ExecutionStatus.RUNNING, CarrierKind.RESUME, ResumeType.CONTINUE, ReplayOutcome.REPLAYED),
        (ExecutionStatus.SUSPENDED, CarrierKind.RESUME, ResumeType.EVENT, ReplayOutcome.REPLAYED),
        (ExecutionStatus.PENDING, CarrierKind.START, None, ReplayOutcome.REPLAYED),
        (None, CarrierKind.START, None, ReplayOutcome.REPLAYED),
    ],
)
def test_a_replay_into_an_execution_that_ended_is_refused_unless_it_wakes_it(
    status: ExecutionStatus | None,
    kind: CarrierKind,
    resume_type: ResumeType | None,
    outcome: ReplayOutcome,
) -> None:
    """A replay that would do nothing never claims success: only a retry wakes an error."""
    decision = decide_replay(
        entry(kind=kind, resume_type=resume_type),
        marker_set=False,
        tombstone=None,
        requested_tenant=None,
        status=status,
    )

    assert decision.outcome is outcome
    if outcome is ReplayOutcome.EXECUTION_ENDED:
        assert f"has already ended ({status})" in decision.detail
        assert ("plaita executions retry x-1" in decision.detail) == (
            status is not ExecutionStatus.COMPLETED
        )


def test_a_second_replay_of_the_same_entry_is_already_replayed() -> None:
    """W10, A53-S2: a second replay answers already_replayed and sends no second carrier."""
    assert replay(entry(), marker_set=True).outcome is ReplayOutcome.ALREADY_REPLAYED


def test_an_entry_newer_than_this_build_is_refused_before_enqueue() -> None:
    """W10/W11, A53-S2: no copy that would be dead-lettered again on its first read."""
    decision = replay(entry(schema_version=CURRENT_SCHEMA_VERSION + 1))

    assert decision.outcome is ReplayOutcome.SCHEMA_TOO_NEW
    assert decision.execution_id is None


def test_an_entry_without_a_schema_version_replays_as_v1() -> None:
    """W11, A53-S2: missing means v1."""
    assert replay(entry(schema_version=None)).schema_version == 1


def test_a_start_without_an_execution_id_gets_a_deterministic_id_and_a_dedup_key() -> None:
    """W10, A53-S2: after the marker expired, or forced, a replay still lands on one execution."""
    start = entry(kind=CarrierKind.START, execution_id=None)
    decision = replay(start)

    assert decision.outcome is ReplayOutcome.REPLAYED
    assert decision.execution_id == replay_execution_id("plaita:tasks:dlq", "1800000000000-3")
    assert decision.execution_id == target_execution_id(start)
    assert decision.dedup_key == "dlq-replay:plaita:tasks:dlq:1800000000000-3"


def test_a_start_without_an_id_keeps_the_dedup_key_its_producer_gave() -> None:
    decision = replay(entry(kind=CarrierKind.START, execution_id=None, dedup_key="order-7"))

    assert decision.dedup_key == "order-7"


def test_a_start_with_an_execution_id_is_replayed_under_it_without_a_new_dedup_key() -> None:
    """W6/W10: a redelivered start of an existing row already becomes a resume-continue."""
    decision = replay(entry(kind=CarrierKind.START, execution_id="x-9"))

    assert (decision.execution_id, decision.dedup_key) == ("x-9", None)


def test_a_tombstoned_execution_is_not_revived_by_replay() -> None:
    """W10/W13, A53-S2: a tombstone hit → execution_deleted."""
    tombstone = Tombstone(tenant_id="acme", deleted_at_ms=1, reason="deleted")
    decision = replay(entry(), tombstone=tombstone)

    assert decision.outcome is ReplayOutcome.EXECUTION_DELETED


def test_another_tenants_tombstone_does_not_block_a_replay() -> None:
    """W13, A51-01: only the same tenant's tombstone is a hit."""
    tombstone = Tombstone(tenant_id="globex", deleted_at_ms=1, reason="deleted")

    assert replay(entry(), tombstone=tombstone).outcome is ReplayOutcome.REPLAYED


def test_a_requested_tenant_that_differs_from_the_entrys_is_a_mismatch() -> None:
    """W10/W24, A53-S2: the payload's tenant differs from the explicit one → tenant_mismatch."""
    decision = replay(entry(), requested_tenant="globex")

    assert decision.outcome is ReplayOutcome.TENANT_MISMATCH
    assert "'acme'" in decision.detail and "'globex'" in decision.detail


def test_an_entry_without_a_tenant_replays_under_the_explicit_one() -> None:
    """W10, A53-S2: a missing tenant_id must be named explicitly by the operator."""
    decision = replay(entry(tenant_id=None), requested_tenant="acme")

    assert (decision.outcome, decision.tenant_id) == (ReplayOutcome.REPLAYED, "acme")


def test_an_entry_without_a_tenant_and_no_explicit_tenant_is_refused() -> None:
    """W10/W24, A53-S2: never defaulted; reported as a mismatch with the reason."""
    decision = replay(entry(tenant_id=None))

    assert decision.outcome is ReplayOutcome.TENANT_MISMATCH
    assert "explicitly" in decision.detail


def test_a_resume_dead_letter_without_an_execution_id_cannot_be_described() -> None:
    with pytest.raises(ValueError, match="execution_id"):
        entry(execution_id=None)


@pytest.mark.parametrize("version", [0, -1])
def test_a_dead_letter_with_an_impossible_schema_version_cannot_be_described(
    version: int,
) -> None:
    """W11: versions start at 1; such an entry is read as malformed, never replayed."""
    with pytest.raises(ValueError, match="schema_version"):
        entry(schema_version=version)


def test_the_replay_marker_lives_seven_days() -> None:
    """W10, A53-S2: plaita:dlq:replay:{key}:{id}, 7 days."""
    assert REPLAY_MARKER_TTL_SECONDS == 7 * 24 * 3600


def test_a_replayed_carrier_keeps_its_age() -> None:
    """W14, A51-01: no timestamp → dead_lettered_at or the DLQ stream id, never refreshed to now."""
    assert replay_timestamp_ms(payload_timestamp_ms=5, dead_lettered_at_ms=7, dlq_id="9-0") == 5
    assert replay_timestamp_ms(payload_timestamp_ms=None, dead_lettered_at_ms=7, dlq_id="9-0") == 7
    assert (
        replay_timestamp_ms(payload_timestamp_ms=None, dead_lettered_at_ms=None, dlq_id="9-0") == 9
    )
    assert (
        replay_timestamp_ms(payload_timestamp_ms=None, dead_lettered_at_ms=None, dlq_id="?") is None
    )


stream_ids = st.builds(lambda ms, seq: f"{ms}-{seq}", st.integers(0, 2**48), st.integers(0, 99))
entries = st.builds(
    DlqEntry,
    dlq_key=st.text(max_size=12),
    dlq_id=stream_ids,
    kind=st.just(CarrierKind.START),
    execution_id=st.none() | st.text(min_size=1, max_size=6),
    schema_version=st.none() | st.integers(1, 4),
    tenant_id=st.none() | st.sampled_from(["", "acme", "globex"]),
    dedup_key=st.none() | st.text(max_size=6),
) | st.builds(
    DlqEntry,
    dlq_key=st.text(max_size=12),
    dlq_id=stream_ids,
    kind=st.just(CarrierKind.RESUME),
    execution_id=st.text(min_size=1, max_size=6),
    schema_version=st.none() | st.integers(1, 4),
    tenant_id=st.none() | st.sampled_from(["", "acme", "globex"]),
)
tombstones = st.none() | st.builds(
    Tombstone, st.sampled_from(["", "acme", "globex"]), st.integers(0, 10), st.just("deleted")
)
tenants = st.none() | st.sampled_from(["acme", "globex"])


@given(entries, st.booleans(), tombstones, tenants, tombstones, tenants)
def test_a_second_replay_of_any_entry_is_always_already_replayed(
    dlq_entry: DlqEntry,
    marker_set: bool,
    tombstone: Tombstone | None,
    tenant: str | None,
    later_tombstone: Tombstone | None,
    later_tenant: str | None,
) -> None:
    """W10, A53-S2: the marker is set by the first replay; nothing after gets through."""
    first = replay(dlq_entry, marker_set=marker_set, tombstone=tombstone, requested_tenant=tenant)
    marker_set = marker_set or first.outcome is ReplayOutcome.REPLAYED

    second = replay(
        dlq_entry, marker_set=marker_set, tombstone=later_tombstone, requested_tenant=later_tenant
    )

    if first.outcome is ReplayOutcome.REPLAYED:
        assert second.outcome is ReplayOutcome.ALREADY_REPLAYED
    if marker_set:
        assert second.outcome is ReplayOutcome.ALREADY_REPLAYED


@given(entries, st.booleans(), tombstones, tenants, st.integers(1, 3))
def test_every_replay_gets_a_named_outcome_and_replays_only_what_this_build_can_read(
    dlq_entry: DlqEntry,
    marker_set: bool,
    tombstone: Tombstone | None,
    tenant: str | None,
    build: int,
) -> None:
    """W10 totality: a replay has an id, a tenant and a version this build understands."""
    decision = decide_replay(
        dlq_entry,
        marker_set=marker_set,
        tombstone=tombstone,
        requested_tenant=tenant,
        build_schema_version=build,
    )

    assert decision.outcome in ReplayOutcome
    if decision.outcome is ReplayOutcome.REPLAYED:
        assert decision.execution_id and decision.tenant_id
        assert decision.schema_version is not None and decision.schema_version <= build
        assert tombstone is None or not tombstone.blocks(decision.tenant_id)
        if dlq_entry.kind is CarrierKind.START and not dlq_entry.execution_id:
            assert decision.dedup_key is not None


@given(st.text(max_size=20), stream_ids)
def test_minted_ids_are_deterministic_uuid5s(dlq_key: str, dlq_id: str) -> None:
    """W10, A53-S2: uuid5(dlq_key, dlq_id)."""
    minted = replay_execution_id(dlq_key, dlq_id)

    assert minted == replay_execution_id(dlq_key, dlq_id)
    assert uuid.UUID(minted).version == 5
    assert minted == str(uuid.uuid5(REPLAY_NAMESPACE, f"{dlq_key}:{dlq_id}"))


@given(st.tuples(st.text(max_size=20), stream_ids), st.tuples(st.text(max_size=20), stream_ids))
def test_minted_ids_differ_for_different_dead_letters(
    a: tuple[str, str], b: tuple[str, str]
) -> None:
    """W10: a stream id has no ':', so "<key>:<id>" names one (dlq_key, dlq_id) only."""
    assert (replay_execution_id(*a) == replay_execution_id(*b)) is (a == b)


def test_a_start_carrier_of_an_execution_never_checkpointed_is_terminalised_not_lost() -> None:
    """W9/I0: a start whose first node crashed every worker has no state; releasing it would
    lose the execution the caller was promised, so its failure is recorded first."""
    decision = guard_dead_letter(
        execution=ExecutionLookup.MISSING,
        lease=LeaseLookup.FREE,
        node_budget_exhausted=False,
        schema_rejected=False,
        start_carrier=True,
    )
    assert decision.action is GuardAction.TERMINALISE_THEN_RELEASE
    assert decision.reason == "start_never_checkpointed"
