"""Task envelopes: start vs resume invariants and schema versions (W1, W11)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.envelope import (
    CURRENT_SCHEMA_VERSION,
    LEGACY_GENERATIONS,
    CarrierKind,
    ResumeType,
    TaskEnvelope,
    check_schema_version,
    continue_copy,
    copy_envelope,
)
from plaita.domain.errors import InvalidTenantIdError, SchemaVersionError
from plaita.domain.priorities import Priority


def test_a_start_carrier_has_no_resume_type_and_the_current_schema() -> None:
    params = {"amount": 120}
    envelope = TaskEnvelope.start(
        execution_id="x-1",
        flow_id="approval",
        version="3",
        params=params,
        now_ms=1_000,
        tenant_id="acme",
        dedup_key="order-7",
        generations=LEGACY_GENERATIONS,
    )
    params["amount"] = 0

    assert envelope.kind is CarrierKind.START
    assert envelope.resume_type is None
    assert envelope.params == {"amount": 120}
    assert (envelope.version, envelope.tenant_id, envelope.dedup_key) == ("3", "acme", "order-7")
    assert envelope.timestamp_ms == 1_000
    assert envelope.schema_version == CURRENT_SCHEMA_VERSION == 1


@pytest.mark.parametrize("resume_type", list(ResumeType))
def test_a_resume_carrier_carries_its_resume_type(resume_type: ResumeType) -> None:
    envelope = TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="approval",
        resume_type=resume_type,
        now_ms=2_000,
        event={"event_type": "approval_decision", "data": {"ok": True}},
        subscription_id="s-1",
        generations=LEGACY_GENERATIONS,
    )

    assert envelope.kind is CarrierKind.RESUME
    assert envelope.resume_type is resume_type
    assert envelope.subscription_id == "s-1"
    assert envelope.event == {"event_type": "approval_decision", "data": {"ok": True}}


def test_the_resume_types_are_the_five_the_spec_names_and_a_childs_end() -> None:
    """W1's five, and ``child`` (E13, E14): a child execution ended."""
    assert {t.value for t in ResumeType} == {
        "continue",
        "retry",
        "event",
        "timeout",
        "cancel",
        "child",
    }


def test_a_resume_carrier_without_resume_type_is_refused() -> None:
    with pytest.raises(ValueError, match="resume_type"):
        TaskEnvelope(
            kind=CarrierKind.RESUME,
            execution_id="x",
            flow_id="f",
            timestamp_ms=0,
            generations=LEGACY_GENERATIONS,
        )


@pytest.mark.parametrize("resume_type", list(ResumeType))
def test_a_start_carrier_with_a_resume_type_is_refused(resume_type: ResumeType) -> None:
    with pytest.raises(ValueError, match="resume_type"):
        TaskEnvelope(
            kind=CarrierKind.START,
            execution_id="x",
            flow_id="f",
            timestamp_ms=0,
            resume_type=resume_type,
            generations=LEGACY_GENERATIONS,
        )


def test_envelopes_are_frozen() -> None:
    envelope = TaskEnvelope.resume(
        execution_id="x",
        flow_id="f",
        resume_type=ResumeType.CONTINUE,
        now_ms=0,
        generations=LEGACY_GENERATIONS,
    )

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        envelope.resume_type = None  # type: ignore[misc]


# --- schema versions (W11) ----------------------------------------------------------


def test_the_current_schema_version_is_accepted() -> None:
    check_schema_version(CURRENT_SCHEMA_VERSION)


@pytest.mark.parametrize("version", [CURRENT_SCHEMA_VERSION + 1, 99])
def test_a_newer_schema_version_is_refused_with_advice_to_upgrade(version: int) -> None:
    with pytest.raises(SchemaVersionError, match="upgrade the worker"):
        check_schema_version(version)


@pytest.mark.parametrize("version", [0, -1])
def test_zero_or_negative_schema_version_is_refused(version: int) -> None:
    with pytest.raises(SchemaVersionError, match="not a valid version"):
        check_schema_version(version)


@given(st.integers())
def test_only_versions_from_1_to_the_current_one_are_accepted(version: int) -> None:
    if 1 <= version <= CURRENT_SCHEMA_VERSION:
        check_schema_version(version)
    else:
        with pytest.raises(SchemaVersionError):
            check_schema_version(version)


@pytest.mark.parametrize("tenant_id", ["", "a:b", "{acme}", "a b", "-x", "x" * 65])
def test_a_carrier_must_name_a_valid_tenant(tenant_id: str) -> None:
    """W24: the tenant picks the key namespace, so it is checked like an identifier."""
    with pytest.raises(InvalidTenantIdError, match="tenant id"):
        TaskEnvelope.start(
            execution_id="x",
            flow_id="f",
            version=None,
            params={},
            now_ms=1,
            tenant_id=tenant_id,
            generations=LEGACY_GENERATIONS,
        )


@pytest.mark.parametrize("level", list(Priority))
def test_a_copy_keeps_its_sources_priority(level: Priority) -> None:
    """A retry, hand-over or recovery copy of an urgent start stays urgent."""
    source = TaskEnvelope.start(
        execution_id="x-1",
        flow_id="approval",
        version="1",
        params={},
        now_ms=1_000,
        generations=LEGACY_GENERATIONS,
        priority=level,
    )
    assert copy_envelope(source, timestamp_ms=500, handovers=1).priority is level


def test_a_carrier_without_a_priority_is_normal() -> None:
    resume = TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="approval",
        resume_type=ResumeType.EVENT,
        now_ms=1_000,
        generations=LEGACY_GENERATIONS,
    )
    assert resume.priority is Priority.NORMAL


def test_a_continue_copy_drops_the_event_wait_and_dedup_key_and_keeps_age_and_priority() -> None:
    """A node's retry and a rate-limited node's next try: the same execution, continued."""
    source = TaskEnvelope.start(
        execution_id="x-1",
        flow_id="approval",
        version="1",
        params={"amount": 5},
        now_ms=1_000,
        generations=LEGACY_GENERATIONS,
        dedup_key="order-7",
        priority=Priority.HIGH,
    )

    copy = continue_copy(source, origin="rate_limit")

    assert (copy.kind, copy.resume_type) == (CarrierKind.RESUME, ResumeType.CONTINUE)
    assert (copy.event, copy.subscription_id, copy.dedup_key) == (None, None, None)
    assert (copy.timestamp_ms, copy.priority, copy.origin) == (1_000, Priority.HIGH, "rate_limit")
