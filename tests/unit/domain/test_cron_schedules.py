"""A cron schedule's definition and its recorded state (W22).

``record_due`` table (state: cursor C, buffered B; due D):

  due                 outcome          -> cursor  buffered  counts / last          result
  D > C               fired  (x)       -> D       B         fired+1, last=D/x      recorded
  D > C               skipped          -> D       B         skipped+1              recorded
  D > C               buffered         -> D       D         -                      recorded
  D > C               failed (e)       -> D       B         failed+1, last_error=e recorded
  D == B (< C)        fired / failed   -> C       none      fired+1 / failed+1     recorded
  D == B (< C)        skipped/buffered -> -       -         -                      None
  D <= C, D != B      any              -> -       -         -                      None
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.cron_schedules import (
    MAX_ERROR_LENGTH,
    CatchUpPolicy,
    DueOutcome,
    OverlapPolicy,
    Schedule,
    ScheduleState,
    record_due,
    resumed,
    schedule_input_from_text,
)
from plaita.domain.errors import (
    InvalidCronExpressionError,
    InvalidFlowIdError,
    InvalidScheduleError,
    InvalidScheduleIdError,
    InvalidScheduleInputError,
    InvalidSchedulePolicyError,
    InvalidTenantIdError,
    PayloadLimitError,
    UnknownTimeZoneError,
)
from plaita.domain.limits import MAX_JSON_BYTES, MAX_JSON_DEPTH

NOW = 1_767_225_600_000
C = NOW + 60_000


def create(**overrides: object) -> Schedule:
    options: dict[str, object] = {
        "schedule_id": "nightly",
        "tenant_id": "default",
        "flow_id": "report",
        "cron": "0 3 * * *",
        "now_ms": NOW,
    }
    options.update(overrides)
    return Schedule.create(**options)  # type: ignore[arg-type]


def nested(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


# --- creating a schedule ------------------------------------------------------------------


def test_a_new_schedule_has_the_defaults_and_starts_after_its_creation() -> None:
    schedule = create()

    assert schedule.overlap is OverlapPolicy.ALLOW
    assert schedule.catch_up is CatchUpPolicy.LATEST
    assert schedule.cron.timezone == "UTC"
    assert schedule.flow_version is None and schedule.input == {}
    assert ScheduleState.new(schedule) == ScheduleState(cursor_ms=NOW)


def test_a_schedule_round_trips_through_its_json() -> None:
    schedule = create(
        timezone="Europe/Berlin",
        flow_version="2",
        input={"a": [1, {"b": None}]},
        overlap="skip",
        catch_up="all",
    )

    assert Schedule.from_json(schedule.to_json()) == schedule


@pytest.mark.parametrize(
    ("overrides", "error", "setting"),
    [
        ({"cron": "every day"}, InvalidCronExpressionError, "cron"),
        ({"cron": "R 3 * * *"}, InvalidCronExpressionError, "cron"),
        # 30 February never comes; neither does a past year.
        ({"cron": "0 0 30 2 *"}, InvalidCronExpressionError, "cron"),
        ({"cron": "0 0 1 1 * 0 2020"}, InvalidCronExpressionError, "cron"),
        ({"timezone": "Europe/Nowhere"}, UnknownTimeZoneError, "timezone"),
        ({"overlap": "queue"}, InvalidSchedulePolicyError, "overlap"),
        ({"overlap": None}, InvalidSchedulePolicyError, "overlap"),
        ({"catch_up": "some"}, InvalidSchedulePolicyError, "catch_up"),
        ({"input": [1, 2]}, InvalidScheduleInputError, "input"),
        ({"input": "{}"}, InvalidScheduleInputError, "input"),
        ({"flow_version": ""}, InvalidScheduleError, "version"),
        ({"flow_version": 3}, InvalidScheduleError, "version"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(
    overrides: dict[str, object], error: type[InvalidScheduleError], setting: str
) -> None:
    with pytest.raises(error) as raised:
        create(**overrides)

    assert raised.value.setting == setting
    assert str(raised.value).startswith(f"{setting}: ")


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"schedule_id": "night/ly"}, InvalidScheduleIdError),
        ({"schedule_id": ""}, InvalidScheduleIdError),
        ({"tenant_id": "a:b"}, InvalidTenantIdError),
        ({"flow_id": "a b"}, InvalidFlowIdError),
        ({"input": {"big": "x" * (MAX_JSON_BYTES + 1)}}, PayloadLimitError),
        ({"input": {"deep": nested(MAX_JSON_DEPTH + 1)}}, PayloadLimitError),
    ],
)
def test_ids_and_oversize_input_follow_the_rules_of_every_boundary(
    overrides: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        create(**overrides)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, {}), ("{}", {}), ('{"day": "mon", "n": 2}', {"day": "mon", "n": 2})],
)
def test_input_text_is_read_as_a_json_object(text: str | None, expected: dict[str, object]) -> None:
    assert schedule_input_from_text(text) == expected


@pytest.mark.parametrize(("text", "hint"), [("{day: 1}", "not valid JSON"), ("[1]", "JSON object")])
def test_input_text_that_is_no_json_object_is_refused_by_name(text: str, hint: str) -> None:
    with pytest.raises(InvalidScheduleInputError, match=hint):
        schedule_input_from_text(text)


# --- recording dues (the table above) -----------------------------------------------------


STATE = ScheduleState(cursor_ms=C, buffered_due_ms=C - 30_000, last_due_ms=C - 60_000)
B = C - 30_000
D = C + 60_000


@pytest.mark.parametrize(
    ("due", "outcome", "expected"),
    [
        (
            D,
            DueOutcome.FIRED,
            ScheduleState(D, last_due_ms=D, last_execution_id="x", buffered_due_ms=B, fired=1),
        ),
        (
            D,
            DueOutcome.SKIPPED,
            ScheduleState(D, last_due_ms=C - 60_000, buffered_due_ms=B, skipped=1),
        ),
        (D, DueOutcome.BUFFERED, ScheduleState(D, last_due_ms=C - 60_000, buffered_due_ms=D)),
        (
            D,
            DueOutcome.FAILED,
            ScheduleState(
                D, last_due_ms=C - 60_000, buffered_due_ms=B, failed=1, last_error="gone"
            ),
        ),
        (B, DueOutcome.FIRED, ScheduleState(C, last_due_ms=B, last_execution_id="x", fired=1)),
        (
            B,
            DueOutcome.FAILED,
            ScheduleState(C, last_due_ms=C - 60_000, failed=1, last_error="gone"),
        ),
        (B, DueOutcome.SKIPPED, None),
        (B, DueOutcome.BUFFERED, None),
        (C, DueOutcome.FIRED, None),
        (C - 1, DueOutcome.SKIPPED, None),
    ],
)
def test_record_due_table(due: int, outcome: DueOutcome, expected: ScheduleState | None) -> None:
    after = record_due(STATE, due, outcome, execution_id="x", error="gone")

    assert after == expected


def test_a_buffered_due_that_fires_late_does_not_replace_a_newer_last_execution() -> None:
    state = ScheduleState(cursor_ms=D, buffered_due_ms=B, last_due_ms=D, last_execution_id="new")

    after = record_due(state, B, DueOutcome.FIRED, execution_id="old")

    assert after == ScheduleState(D, last_due_ms=D, last_execution_id="new", fired=1)


def test_a_failure_keeps_a_bounded_error_text() -> None:
    after = record_due(ScheduleState(C), D, DueOutcome.FAILED, error="x" * 10_000)

    assert after is not None and after.last_error == "x" * MAX_ERROR_LENGTH


def test_resuming_passes_over_the_dues_of_the_pause_and_never_moves_back() -> None:
    assert resumed(ScheduleState(C, paused=True), D) == ScheduleState(D)
    assert resumed(ScheduleState(D, paused=True), C) == ScheduleState(D)


@given(
    records=st.lists(
        st.tuples(st.integers(min_value=0, max_value=20), st.sampled_from(list(DueOutcome))),
        max_size=30,
    )
)
def test_the_cursor_never_moves_back_and_each_due_counts_at_most_once(
    records: list[tuple[int, DueOutcome]],
) -> None:
    """W22 (property): however replicas interleave their records, a due is counted once and
    the cursor only moves forward."""
    state = ScheduleState(cursor_ms=0)
    fired: list[int] = []
    for due, outcome in records:
        after = record_due(state, due, outcome, execution_id=f"x{due}")
        if after is None:
            continue
        assert after.cursor_ms >= state.cursor_ms
        if outcome is DueOutcome.FIRED:
            fired.append(due)
        state = after
    assert len(fired) == len(set(fired)) == state.fired
