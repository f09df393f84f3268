"""Delete = revoke + tombstone (W13) and the carrier-age gate (W14).

Incidents (docs/incidents.md): A51-01, A52-01 and A69-04 (the delete tombstone: per tenant,
its TTL, a second delete) and A2R25-04/05 (a state restored from a backup does not undo a
delete, nor give a stale holder its write back).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from plaita.domain.tombstone import (
    DAY_MS,
    DEFAULT_CARRIER_MAX_AGE_MS,
    DEFAULT_TOMBSTONE_TTL_SECONDS,
    AgeDecision,
    AgeVerdict,
    DispatchPath,
    GateAction,
    GateDecision,
    Tombstone,
    TombstoneTtl,
    carrier_age_ms,
    check_carrier_age,
    copy_timestamp_ms,
    effective_max_age_ms,
    gate,
    parse_stream_id_ms,
    record_delete,
    refreshed_ttl_seconds,
    tombstone_ttl_seconds,
)

DAY_S = 24 * 3600
NOW = 1_800_000_000_000
STREAM_ID = re.compile(r"[0-9]+-[0-9]+")
ACME = Tombstone(tenant_id="acme", deleted_at_ms=NOW, reason="gdpr request 7")


def stream_id(ms: int, seq: int = 0) -> str:
    return f"{ms}-{seq}"


# --- tombstone record ------------------------------------------------------------------


def test_a_tombstone_blocks_carriers_of_the_deleting_tenant() -> None:
    """W13, A51-01: same tenant → hit."""
    assert ACME.blocks("acme")


def test_a_tombstone_lets_another_tenants_execution_with_the_same_id_through() -> None:
    """W13/W24, A51-01 (the same id under another tenant passes): ids live in their tenant's
    namespace, so the same id elsewhere is another execution; blocking it would be cross-tenant
    interference."""
    assert not ACME.blocks("globex")


@pytest.mark.parametrize("tenant", ["", None, "default"])
def test_an_empty_or_absent_tenant_is_the_default_tenant(tenant: str | None) -> None:
    """W24: empty, absent and "default" all route to the default namespace, so they are one."""
    assert Tombstone(tenant_id="", deleted_at_ms=0, reason="x").blocks(tenant)
    assert not ACME.blocks(tenant)


def test_the_first_delete_writes_the_tombstone() -> None:
    """W13: tenant, deleted_at and reason are recorded."""
    tombstone = record_delete(None, tenant_id="acme", now_ms=NOW, reason="gdpr request 7")

    assert tombstone == ACME


def test_a_second_delete_keeps_the_first_deleted_at() -> None:
    """W13, A69-04: SET NX keeps the first record; only the TTL may grow."""
    again = record_delete(ACME, tenant_id="acme", now_ms=NOW + DAY_MS, reason="again")

    assert again.deleted_at_ms == NOW
    assert again == ACME


def test_a_second_delete_only_ever_extends_the_ttl() -> None:
    """W13, A69-04: the TTL only ever grows; a legacy record without expiry is never shortened."""
    assert refreshed_ttl_seconds(10, 30) == 30
    assert refreshed_ttl_seconds(90, 30) == 90
    assert refreshed_ttl_seconds(None, 30) is None


def test_a_tombstone_round_trips_through_json() -> None:
    assert Tombstone.from_json(ACME.to_json()) == ACME


# --- tombstone TTL (W13) ---------------------------------------------------------------


def ttl(configured: int | None = None, state: int = 0, max_age_ms: int = 0) -> TombstoneTtl:
    return tombstone_ttl_seconds(
        configured_seconds=configured, state_ttl_seconds=state, carrier_max_age_ms=max_age_ms
    )


def test_the_tombstone_ttl_defaults_to_thirty_days() -> None:
    """W13, A51-01: an independent default of 30 days."""
    assert ttl().seconds == DEFAULT_TOMBSTONE_TTL_SECONDS == 30 * DAY_S


def test_a_longer_configured_ttl_is_kept() -> None:
    assert ttl(configured=40 * DAY_S).seconds == 40 * DAY_S


def test_a_configured_ttl_below_thirty_days_is_raised_to_thirty() -> None:
    """W13: TTL ≥ 30 days."""
    assert ttl(configured=DAY_S).seconds == 30 * DAY_S


@pytest.mark.parametrize("configured", [0, -1])
def test_a_non_positive_configured_ttl_falls_back_to_the_default_with_a_warning(
    configured: int,
) -> None:
    """W13, A52-01: <= 0 is invalid, never an implicit "forever"."""
    result = ttl(configured=configured)

    assert (result.seconds, result.fell_back_to_default) == (30 * DAY_S, True)


def test_the_ttl_is_never_shorter_than_the_state_ttl() -> None:
    """W13: TTL ≥ the state TTL, so a restored state row is still blocked (A2R25-04)."""
    assert ttl(state=60 * DAY_S).seconds == 60 * DAY_S


def test_a_state_ttl_of_zero_does_not_make_the_tombstone_permanent() -> None:
    """W13, A51-01: STATE_TTL=0 no longer yields a permanent tombstone."""
    assert ttl(state=0).seconds == 30 * DAY_S


def test_the_carrier_max_age_caps_the_ttl_when_the_bounds_conflict() -> None:
    """W13/W14, A51-01 (clamped to the carrier max age): past the max age the age gate already
    drops every carrier from before the delete and every copy of one."""
    result = ttl(state=60 * DAY_S, max_age_ms=7 * DAY_MS)

    assert (result.seconds, result.clamped_to_max_age) == (7 * DAY_S, True)


def test_a_disabled_age_gate_puts_no_ceiling_on_the_ttl() -> None:
    """W14: max age 0 disables the gate, so it bounds nothing."""
    assert ttl(state=90 * DAY_S, max_age_ms=0).seconds == 90 * DAY_S


def test_a_sub_second_max_age_still_gives_a_ttl_redis_accepts() -> None:
    assert ttl(max_age_ms=500).seconds == 1


def test_a_negative_max_age_caps_the_ttl_at_the_default_max_age() -> None:
    """W14/W21: a negative max age keeps the default gate, not no gate."""
    assert ttl(state=60 * DAY_S, max_age_ms=-1).seconds == 30 * DAY_S
    assert effective_max_age_ms(-5) == DEFAULT_CARRIER_MAX_AGE_MS


@given(
    configured=st.none() | st.integers(-10, 400 * DAY_S),
    state=st.integers(0, 400 * DAY_S),
    max_age_ms=st.integers(0, 400 * DAY_MS),
)
def test_the_tombstone_ttl_stays_within_its_bounds_whenever_they_can_be_met(
    configured: int | None, state: int, max_age_ms: int
) -> None:
    """W13: ≥ 30 days, ≥ state TTL, ≤ max age when satisfiable; else exactly the max age.
    "Clamped" means the wanted TTL (configured, 30 days or the state TTL) was cut to the max
    age — which also happens to a configured TTL above a satisfiable ceiling."""
    result = ttl(configured, state, max_age_ms)
    floor = max(30 * DAY_S, state)
    wanted = max(floor, configured or 0)
    ceiling = max_age_ms // 1000 if max_age_ms else None

    if ceiling is None or floor <= ceiling:
        assert floor <= result.seconds
        assert ceiling is None or result.seconds <= ceiling
        assert result.clamped_to_max_age == (ceiling is not None and wanted > ceiling)
    else:
        assert result.seconds == max(1, ceiling)
        assert result.clamped_to_max_age


# --- dispatch gate (W13) ---------------------------------------------------------------


@pytest.mark.parametrize("path", list(DispatchPath))
def test_every_dispatch_path_passes_when_there_is_no_tombstone(path: DispatchPath) -> None:
    assert gate(path, tombstone=None, carrier_tenant="acme") == GateDecision(GateAction.DISPATCH)


@pytest.mark.parametrize("path", list(DispatchPath))
def test_every_dispatch_path_passes_another_tenants_carrier(path: DispatchPath) -> None:
    """W13, A51-01: the same id under another tenant passes."""
    assert gate(path, tombstone=ACME, carrier_tenant="globex").action is GateAction.DISPATCH


def test_a_start_of_a_deleted_execution_is_dropped_and_frees_its_dedup_key() -> None:
    """W13, A51-01: a replay of the same id is acked, dropped, and frees the dedup mapping."""
    decision = gate(DispatchPath.START, tombstone=ACME, carrier_tenant="acme")

    assert decision == GateDecision(GateAction.DROP_CARRIER, release_dedup=True)


def test_a_resume_of_a_deleted_execution_is_dropped() -> None:
    """W13, A2R25-04: restoring only the state key from a backup does not undo a delete."""
    decision = gate(DispatchPath.RESUME, tombstone=ACME, carrier_tenant="acme")

    assert decision == GateDecision(GateAction.DROP_CARRIER, release_dedup=False)


def test_a_dedup_hit_on_a_deleted_execution_is_dropped_and_frees_the_mapping() -> None:
    """W6/W13, A51-01: the dedup hit never revives the deleted id."""
    decision = gate(DispatchPath.DEDUP_HIT, tombstone=ACME, carrier_tenant="acme")

    assert decision == GateDecision(GateAction.DROP_CARRIER, release_dedup=True)


def test_no_retry_copy_is_made_for_a_deleted_execution() -> None:
    """W8/W13, A51-01: the tombstone is checked again before a node failure's retry copy."""
    decision = gate(DispatchPath.RETRY_COPY, tombstone=ACME, carrier_tenant="acme")

    assert decision == GateDecision(GateAction.SKIP_COPY)


def test_the_dead_letter_guard_makes_no_recovery_clone_of_a_deleted_execution() -> None:
    """W9/W13, A51-01: the tombstone is checked again before the guard's recovery clone."""
    decision = gate(DispatchPath.GUARD_CLONE, tombstone=ACME, carrier_tenant="acme")

    assert decision == GateDecision(GateAction.SKIP_COPY)


# --- stream ids and carrier age (W14) -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [("1700000000000-0", 1_700_000_000_000), ("0-0", 0), ("18446744073709551615-7", 2**64 - 1)],
)
def test_a_stream_id_yields_its_millisecond_part(text: str, ms: int) -> None:
    assert parse_stream_id_ms(text) == ms


@pytest.mark.parametrize(
    "text",
    ["", "-", "1", "1-", "-1", "a-1", "1-a", "1-2-3", " 1-2", "1-2 ", "+1-2", "\uff11-2", "²-1",
     "18446744073709551616-0", "1-18446744073709551616", "9" * 21 + "-0", "9" * 5000 + "-0"],
)  # fmt: skip
def test_a_malformed_stream_id_has_no_time(text: str) -> None:
    """W14: malformed → unknown, never an exception (5000 digits would trip int())."""
    assert parse_stream_id_ms(text) is None


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_every_well_formed_stream_id_parses(ms: int, seq: int) -> None:
    assert parse_stream_id_ms(stream_id(ms, seq)) == ms


def test_the_age_is_the_older_of_payload_and_stream_id() -> None:
    """W14, A51-01: the age is the larger of the payload timestamp's and the stream id's."""
    age = carrier_age_ms(
        now_ms=NOW, payload_timestamp_ms=NOW - 5_000, stream_id=stream_id(NOW - 9_000)
    )

    assert age == 9_000


def test_a_future_payload_stamp_cannot_launder_an_old_stream_id() -> None:
    """W14, A51-01: a future timestamp cannot launder the source's age."""
    age = carrier_age_ms(
        now_ms=NOW, payload_timestamp_ms=NOW + DAY_MS, stream_id=stream_id(NOW - 40 * DAY_MS)
    )

    assert age == 40 * DAY_MS


def test_a_fresh_stream_id_cannot_launder_an_old_payload_stamp() -> None:
    """W14, A51-01: the new stream id of a redelivery cannot launder the source's age."""
    age = carrier_age_ms(now_ms=NOW, payload_timestamp_ms=NOW - DAY_MS, stream_id=stream_id(NOW))

    assert age == DAY_MS


def test_a_carrier_stamped_in_the_future_has_age_zero() -> None:
    """W14: clock skew never yields a negative age."""
    assert carrier_age_ms(now_ms=NOW, payload_timestamp_ms=NOW + 5, stream_id=None) == 0


def test_one_readable_time_is_enough_when_the_other_is_absent() -> None:
    assert carrier_age_ms(now_ms=NOW, payload_timestamp_ms=None, stream_id=stream_id(NOW - 1)) == 1
    assert carrier_age_ms(now_ms=NOW, payload_timestamp_ms=NOW - 2, stream_id=None) == 2


@pytest.mark.parametrize(
    ("payload", "sid"),
    [(None, None), (NOW, "not-an-id"), (-1, stream_id(NOW)), (True, stream_id(NOW))],
    ids=["both-absent", "malformed-stream-id", "negative-stamp", "bool-stamp"],
)
def test_an_age_with_any_unreadable_source_is_unknown(payload: int | None, sid: str | None) -> None:
    """W14: max(age, unknown) is unknown; one readable source cannot vouch for the other."""
    assert carrier_age_ms(now_ms=NOW, payload_timestamp_ms=payload, stream_id=sid) is None


def check(
    payload: int | None, sid: str | None, max_age_ms: int = DEFAULT_CARRIER_MAX_AGE_MS
) -> AgeDecision:
    return check_carrier_age(
        now_ms=NOW, payload_timestamp_ms=payload, stream_id=sid, max_age_ms=max_age_ms
    )


def test_a_carrier_younger_than_the_max_age_is_accepted() -> None:
    decision = check(NOW - DAY_MS, stream_id(NOW - DAY_MS))

    assert decision.accepted and decision.age_ms == DAY_MS


def test_a_carrier_exactly_at_the_max_age_is_accepted() -> None:
    assert check(NOW - 30 * DAY_MS, None).verdict is AgeVerdict.ACCEPT


def test_a_carrier_older_than_thirty_days_is_rejected_by_default() -> None:
    """W14, A51-01: old carriers outliving the tombstone are dropped by the age gate; default
    max 30 days."""
    decision = check(NOW - 30 * DAY_MS - 1, None)

    assert decision.verdict is AgeVerdict.TOO_OLD
    assert not decision.accepted


def test_a_carrier_of_unknown_age_is_rejected() -> None:
    """W14, A51-01: neither time readable → fail closed (WARNING + carrier_age_unknown_total)."""
    decision = check(None, None)

    assert (decision.verdict, decision.age_ms) == (AgeVerdict.UNKNOWN, None)


def test_a_max_age_of_zero_disables_the_gate_and_says_so() -> None:
    """W14, A51-01: 0 disables it (a WARNING at start-up) — the flag tells the caller to warn."""
    decision = check(None, None, max_age_ms=0)

    assert decision.accepted and decision.gate_disabled


def test_a_negative_max_age_keeps_the_default_gate() -> None:
    """W14/W21: a mistake in the setting must not turn the gate off."""
    assert check(NOW - 31 * DAY_MS, None, max_age_ms=-1).verdict is AgeVerdict.TOO_OLD


@given(text=st.text(max_size=30), payload=st.none() | st.integers(0, NOW))
def test_the_age_gate_fails_closed_on_any_unparsable_stream_id(
    text: str, payload: int | None
) -> None:
    """W14: fail closed on every input whose age cannot be read."""
    assume(STREAM_ID.fullmatch(text) is None or not text.isascii())

    assert check(payload, text).verdict is AgeVerdict.UNKNOWN


@given(payload=st.integers(max_value=-1), sid=st.none() | st.just(stream_id(NOW)))
def test_the_age_gate_fails_closed_on_any_negative_payload_stamp(
    payload: int, sid: str | None
) -> None:
    assert check(payload, sid).verdict is AgeVerdict.UNKNOWN


# --- copies keep the source age (W14) ----------------------------------------------------


def test_a_copy_carries_the_earlier_of_the_source_times() -> None:
    """W14, A51-01: a copy takes the earlier of the payload timestamp and the source stream id."""
    assert (
        copy_timestamp_ms(now_ms=NOW, payload_timestamp_ms=NOW - 5, stream_id=stream_id(NOW - 9))
        == NOW - 9
    )


def test_a_future_payload_stamp_is_not_copied() -> None:
    """W14, A51-01: a future stamp yields to the source stream id, and never later than now."""
    assert copy_timestamp_ms(now_ms=NOW, payload_timestamp_ms=NOW + 9, stream_id=None) == NOW
    assert (
        copy_timestamp_ms(now_ms=NOW, payload_timestamp_ms=NOW + 9, stream_id=stream_id(NOW - 3))
        == NOW - 3
    )


def test_no_timestamp_is_offered_for_a_copy_of_a_carrier_of_unknown_age() -> None:
    assert copy_timestamp_ms(now_ms=NOW, payload_timestamp_ms=None, stream_id="bad") is None


@given(
    payload=st.none() | st.integers(0, 2 * NOW),
    sid_ms=st.none() | st.integers(0, 2 * NOW),
    elapsed=st.integers(0, 10 * DAY_MS),
)
def test_a_copy_is_exactly_as_old_as_its_source(
    payload: int | None, sid_ms: int | None, elapsed: int
) -> None:
    """W14: a copy re-enqueued ``elapsed`` ms later (fresh stream id) is older by exactly that."""
    sid = None if sid_ms is None else stream_id(sid_ms)
    source_age = carrier_age_ms(now_ms=NOW, payload_timestamp_ms=payload, stream_id=sid)
    stamp = copy_timestamp_ms(now_ms=NOW, payload_timestamp_ms=payload, stream_id=sid)
    assume(source_age is not None)
    assert source_age is not None and stamp is not None

    later = NOW + elapsed
    copy_age = carrier_age_ms(now_ms=later, payload_timestamp_ms=stamp, stream_id=stream_id(later))

    assert copy_age == source_age + elapsed
