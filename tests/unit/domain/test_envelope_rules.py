"""Envelope rules: schema version decisions and worker-made copies (W11, W12, W14).

Schema decision table (``decide_schema_version``), first read and reclaim alike:

  field as read                  -> verdict         why
  absent                         -> ACCEPT (v1)     missing means v1 (W11)
  1 .. CURRENT (int or text)     -> ACCEPT          W11
  > CURRENT                      -> TOO_NEW         #252, A49-01 (dead-lettered with evidence)
  0 or negative                  -> INVALID         W11
  not an integer (text, bool …)  -> INVALID         a malformed payload (R4)
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.envelope import (
    CURRENT_SCHEMA_VERSION,
    LEGACY_GENERATIONS,
    LEGACY_SCHEMA_VERSION,
    CarrierGenerations,
    CarrierKind,
    ResumeType,
    SchemaVerdict,
    TaskEnvelope,
    check_schema_version,
    copy_envelope,
    decide_schema_version,
)
from plaita.domain.errors import SchemaVersionError

OURS = CarrierGenerations("cf1-aaaaaaaaaaaaaaaa", "cfg1-bbbbbbbbbbbbbbbb", "bg1-cccccccccccccccc")


def _start(**overrides: Any) -> TaskEnvelope:
    fields: dict[str, Any] = {
        "kind": CarrierKind.START,
        "execution_id": "x-1",
        "flow_id": "approval",
        "timestamp_ms": 1_000,
        "params": {"amount": 5},
        "tenant_id": "acme",
        "dedup_key": "order-7",
        "generations": OURS,
    }
    fields.update(overrides)
    return TaskEnvelope(**fields)


# --- schema version decision (W11) ---------------------------------------------------------


def test_an_envelope_without_schema_version_is_legacy_v1_and_accepted() -> None:
    """W11: copies inherit the source envelope's schema_version, and missing means v1."""
    decision = decide_schema_version(None)

    assert decision.accepted
    assert decision.version == LEGACY_SCHEMA_VERSION == 1
    assert decision.raw is None
    assert decision.evidence["schema_version"] == "<absent>"


@pytest.mark.parametrize("raw", [CURRENT_SCHEMA_VERSION, str(CURRENT_SCHEMA_VERSION)])
def test_the_current_schema_version_is_accepted_as_int_or_wire_text(raw: object) -> None:
    """W11: the wire carries the version as text; both spellings are one decision."""
    decision = decide_schema_version(raw)

    assert decision.verdict is SchemaVerdict.ACCEPT
    assert decision.version == CURRENT_SCHEMA_VERSION
    assert decision.reason == ""


@pytest.mark.parametrize("raw", [CURRENT_SCHEMA_VERSION + 1, str(CURRENT_SCHEMA_VERSION + 7)])
def test_a_too_new_schema_is_rejected_with_evidence_for_the_dead_letter(raw: object) -> None:
    """W11, W9; #252 / A49-01: newer than this build → dead-lettered with evidence, and
    the same decision on first read and on reclaim (it depends on the field alone)."""
    decision = decide_schema_version(raw)

    assert decision.verdict is SchemaVerdict.TOO_NEW
    assert decision.verdict.value == "schema_too_new"
    assert "upgrade the worker" in decision.reason
    assert decision.evidence == {
        "schema_version": str(raw),
        "max_schema_version": str(CURRENT_SCHEMA_VERSION),
        "schema_verdict": "schema_too_new",
        "schema_reason": decision.reason,
    }


@pytest.mark.parametrize("raw", [0, -1, "0", "-3"])
def test_a_zero_or_negative_schema_version_is_rejected_as_invalid(raw: object) -> None:
    """W11: no envelope was ever written with a version below 1."""
    decision = decide_schema_version(raw)

    assert decision.verdict is SchemaVerdict.INVALID
    assert "not a valid version" in decision.reason


@pytest.mark.parametrize("raw", ["two", "", "1.0", True, False, 1.0, [1], {"v": 1}])
def test_a_schema_version_that_is_not_an_integer_is_rejected_as_invalid(raw: object) -> None:
    """W11, R4: a malformed field is evidence of a malformed carrier; `true` is not version 1."""
    decision = decide_schema_version(raw)

    assert decision.verdict is SchemaVerdict.INVALID
    assert decision.version is None
    assert "not an integer" in decision.reason
    assert decision.evidence["schema_verdict"] == "schema_invalid"


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.floats()))
def test_the_schema_decision_is_total_and_accepts_exactly_the_understood_versions(
    raw: object,
) -> None:
    """W11: every field value gets a decision; only 1..CURRENT (or absent) is accepted."""
    decision = decide_schema_version(raw)

    understood = decision.version is not None and 1 <= decision.version <= CURRENT_SCHEMA_VERSION
    assert decision.accepted is understood
    assert decision.accepted is (decision.reason == "")
    if isinstance(raw, int) and not isinstance(raw, bool):
        assert decision.version == raw
    assert decision.evidence["max_schema_version"] == str(CURRENT_SCHEMA_VERSION)


@given(st.integers())
def test_check_schema_version_raises_exactly_when_the_decision_rejects(version: int) -> None:
    """W11: the raising API the codec uses keeps its behaviour and messages."""
    decision = decide_schema_version(version)
    if decision.accepted:
        check_schema_version(version)
    else:
        with pytest.raises(SchemaVersionError, match=re.escape(decision.reason)):
            check_schema_version(version)


# --- carrier generations on the envelope (W12) ----------------------------------------------


def test_a_new_carrier_must_name_the_generations_it_is_written_under() -> None:
    """W12: forgetting the stamp fails at construction instead of writing a legacy carrier."""
    with pytest.raises(TypeError, match="generations"):
        TaskEnvelope.start(execution_id="x", flow_id="f", version=None, params={}, now_ms=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="generations"):
        TaskEnvelope.resume(  # type: ignore[call-arg]
            execution_id="x", flow_id="f", resume_type=ResumeType.CONTINUE, now_ms=0
        )


def test_the_legacy_stamp_names_no_generation() -> None:
    """W12 rule 4: carriers written before generations existed stay executable."""
    assert CarrierGenerations() == LEGACY_GENERATIONS
    assert LEGACY_GENERATIONS.is_legacy


@pytest.mark.parametrize(
    ("generations", "legacy"),
    [
        (CarrierGenerations(), True),
        (CarrierGenerations(config_generation="cfg1-bbbbbbbbbbbbbbbb"), True),
        (CarrierGenerations(config_family="cf1-aaaaaaaaaaaaaaaa"), False),
        (CarrierGenerations(budget_generation="bg1-cccccccccccccccc"), False),
    ],
)
def test_a_carrier_is_legacy_when_it_names_neither_family_nor_budget(
    generations: CarrierGenerations, legacy: bool
) -> None:
    """W12: config_generation is observability only, so it alone does not make a carrier new."""
    assert generations.is_legacy is legacy


# --- copies made by the worker (W11, W14, W12) ----------------------------------------------


def test_a_recovery_copy_keeps_schema_timestamp_tenant_and_generations() -> None:
    """W11, W14, W12; A44-02 (copies inherit schema_version), #91 (a redelivered
    start becomes a resume-continue): only what the change names differs."""
    source = _start(schema_version=CURRENT_SCHEMA_VERSION + 1)

    copy = copy_envelope(source, kind=CarrierKind.RESUME, resume_type=ResumeType.CONTINUE)

    assert copy.kind is CarrierKind.RESUME
    assert copy.resume_type is ResumeType.CONTINUE
    assert copy.schema_version == source.schema_version
    assert copy.timestamp_ms == source.timestamp_ms
    assert copy.tenant_id == "acme"
    assert copy.generations == OURS
    assert copy.params == source.params


def test_a_copy_of_a_too_new_envelope_stays_too_new() -> None:
    """W9, W11; A49-01: a copy re-stamped with this build's version would launder a carrier
    this build cannot understand into one it runs under old semantics."""
    source = _start(schema_version=CURRENT_SCHEMA_VERSION + 1)

    copy = copy_envelope(source)

    assert not decide_schema_version(copy.schema_version).accepted


def test_an_explicit_change_wins_over_what_a_copy_keeps() -> None:
    """W12 rule 3: inheritance is the default; a caller may still say otherwise explicitly."""
    source = _start()

    copy = copy_envelope(
        source,
        timestamp_ms=77,
        tenant_id="other",
        schema_version=CURRENT_SCHEMA_VERSION,
        generations=CarrierGenerations(),
    )

    assert (copy.timestamp_ms, copy.tenant_id) == (77, "other")
    assert copy.generations.is_legacy


def test_a_copy_turned_into_a_resume_without_resume_type_is_refused() -> None:
    """W1: a copy obeys the same start/resume invariant as any envelope."""
    with pytest.raises(ValueError, match="resume_type"):
        copy_envelope(_start(), kind=CarrierKind.RESUME)


def test_a_copy_refuses_a_field_envelopes_do_not_have() -> None:
    with pytest.raises(TypeError):
        copy_envelope(_start(), not_a_field=1)


envelopes = st.builds(
    _start,
    timestamp_ms=st.integers(min_value=0, max_value=2**48),
    schema_version=st.integers(min_value=-3, max_value=9),
    tenant_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,7}", fullmatch=True),
    generations=st.builds(
        CarrierGenerations,
        st.none() | st.text(max_size=20),
        st.none() | st.text(max_size=20),
        st.none() | st.text(max_size=20),
    ),
)
changes = st.fixed_dictionaries(
    {},
    optional={
        "execution_id": st.text(min_size=1, max_size=8),
        "params": st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
        "dedup_key": st.none() | st.text(max_size=8),
        "version": st.none() | st.text(max_size=4),
    },
)


@given(source=envelopes, change=changes)
def test_copies_always_keep_schema_version_and_timestamp(
    source: TaskEnvelope, change: dict[str, Any]
) -> None:
    """W11, W14, W12 (property): whatever else a copy changes, its schema_version, timestamp,
    tenant and generations are the source's, and nothing but the change differs."""
    copy = copy_envelope(source, **change)

    assert copy.schema_version == source.schema_version
    assert copy.timestamp_ms == source.timestamp_ms
    assert copy.tenant_id == source.tenant_id
    assert copy.generations == source.generations
    assert copy == attrs.evolve(source, **change)
