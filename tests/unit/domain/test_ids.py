"""The id rule for execution, event, flow and schedule ids (R4)."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.dead_letter import replay_execution_id
from plaita.domain.errors import (
    InvalidEventError,
    InvalidEventIdError,
    InvalidExecutionIdError,
    InvalidFlowIdError,
    InvalidIdError,
    InvalidScheduleIdError,
    ScheduleDedupError,
)
from plaita.domain.ids import (
    ID_PATTERN,
    MAX_ID_LENGTH,
    IdKind,
    validate_event_id,
    validate_execution_id,
    validate_flow_id,
    validate_id,
    validate_schedule_id,
)


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "approval",
        "fault_chain",
        "order-7.v2",
        "tenant:execution:node",  # derived ids and subscription indexes use ':'
        uuid.uuid4().hex,
        str(uuid.uuid4()),
        "9" * MAX_ID_LENGTH,
    ],
)
def test_valid_ids_are_returned_unchanged(value: str) -> None:
    assert validate_execution_id(value) == value


def test_generated_ids_pass() -> None:
    """uuid4 (new executions, events) and uuid5 (a replayed start without an id, W10)."""
    for value in (uuid.uuid4().hex, str(uuid.uuid4()), replay_execution_id("q:{d}:dlq", "1-0")):
        assert validate_execution_id(value) == value


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("", "non-empty string"),
        ("../../etc", "'../../etc'"),
        ("a/b", "no '/'"),
        (".", "start with a letter or digit"),
        ("..", "start with a letter or digit"),
        ("-flag", "start with a letter or digit"),
        ("has space", "'has space'"),
        ("tab\there", "tab"),
        ("new\nline", "new"),
        ("nul\x00", "nul"),
        ("{tag}", "'{tag}'"),
        ("x" * (MAX_ID_LENGTH + 1), f"at most {MAX_ID_LENGTH}"),
        ("café", "'café'"),
    ],
)
def test_invalid_ids_are_refused_by_name(value: str, named: str) -> None:
    with pytest.raises(InvalidExecutionIdError, match=re.escape(named)):
        validate_execution_id(value)


def test_a_non_string_id_is_refused() -> None:
    with pytest.raises(InvalidIdError, match="non-empty string, got 7"):
        validate_id(IdKind.FLOW, 7)


def test_each_kind_has_its_named_error_and_label() -> None:
    cases = [
        (validate_execution_id, InvalidExecutionIdError, "execution id"),
        (validate_event_id, InvalidEventIdError, "event id"),
        (validate_flow_id, InvalidFlowIdError, "flow id"),
        (validate_schedule_id, InvalidScheduleIdError, "schedule id"),
    ]
    for validate, error, label in cases:
        with pytest.raises(error, match=f"^{label} 'a/b'"):
            validate("a/b")
    # Existing families still catch them: an event id is an event problem, and so on.
    assert issubclass(InvalidEventIdError, InvalidEventError)
    assert issubclass(InvalidScheduleIdError, ScheduleDedupError)


@given(st.text(max_size=MAX_ID_LENGTH + 8))
def test_the_published_pattern_and_the_rule_agree(value: str) -> None:
    """The console publishes ID_PATTERN in its schema; it must say what the rule says."""
    accepted = re.fullmatch(ID_PATTERN, value) is not None and len(value) <= MAX_ID_LENGTH
    try:
        validate_execution_id(value)
    except InvalidExecutionIdError:
        assert not accepted
    else:
        assert accepted
        assert "/" not in value and value not in (".", "..")
