"""The flow-control note: what an operator reads of why an execution waits for room to run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.flow_control import Waiting, WaitReason

notes = st.builds(
    Waiting,
    reason=st.sampled_from(WaitReason),
    since_ms=st.integers(min_value=0, max_value=2**53),
    detail=st.text(max_size=80),
    key=st.none() | st.text(max_size=40),
    holders=st.lists(st.text(min_size=1, max_size=20), max_size=5).map(tuple),
    limit=st.none() | st.integers(min_value=1, max_value=10_000),
    due_ms=st.none() | st.integers(min_value=0, max_value=2**53),
)


@given(notes)
def test_a_note_survives_its_json(note: Waiting) -> None:
    assert Waiting.from_json(note.to_json()) == note
    assert Waiting.from_json(note.to_json().encode()) == note


def test_the_reasons_are_the_ones_operators_alert_on() -> None:
    assert [reason.value for reason in WaitReason] == [
        "concurrency",
        "rate_limit",
        "tenant_quota",
        "tenant_suspended",
        "tenant_status_stale",
    ]


@pytest.mark.parametrize(
    "stored",
    [
        "not json",
        "[]",
        "{}",
        '{"reason": "from_a_newer_build", "since_ms": 1, "detail": "?"}',
        '{"reason": "concurrency", "since_ms": "soon", "detail": "?"}',
        '{"reason": "concurrency", "detail": "no since"}',
    ],
)
def test_a_note_this_build_cannot_read_is_none(stored: str) -> None:
    assert Waiting.from_json(stored) is None


def test_optional_fields_may_be_absent() -> None:
    note = Waiting.from_json('{"reason": "tenant_suspended", "since_ms": 5, "detail": "parked"}')

    assert note == Waiting(WaitReason.TENANT_SUSPENDED, 5, "parked")
