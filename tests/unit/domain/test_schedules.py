"""Dedup keys of scheduled starts (W22; #23, #118).

Key table (``cron_fire_key`` / ``manual_fire_key``):

  trigger  due_at  next_run_at  -> key                                source       warning
  cron     given   any          -> sched:{id}:due:{due_at}            DUE_AT       -
  cron     -       given        -> sched:{id}:due:{next_run_at}       NEXT_RUN_AT  -
  cron     -       -            -> sched:{id}:fired:{wall-clock s}    FIRED_AT     yes
  manual   (request id)         -> sched:{id}:manual:{request_id}     MANUAL       -
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import ScheduleDedupError
from plaita.domain.schedules import (
    DUE_MISSING_EVENT,
    KeySource,
    ScheduleKey,
    cron_dedup_key,
    cron_fire_key,
    fired_dedup_key,
    manual_dedup_key,
    manual_fire_key,
)

from ..strategies import valid_ids

DUE = 1_767_225_600_000


def test_a_cron_key_names_the_schedule_and_its_due_time() -> None:
    """W22: sched:{schedule_id}:due:{due_ms}."""
    assert cron_dedup_key("nightly", DUE) == f"sched:nightly:due:{DUE}"


def test_two_fires_of_one_due_share_a_key_whatever_the_fire_time() -> None:
    """W22; #118: a re-fire after the 30 s lock expired, in another wall-clock second, must
    converge on the same execution instead of running twice."""
    first = cron_fire_key("nightly", due_at_ms=None, next_run_at_ms=DUE, fired_at_ms=DUE + 10)
    again = cron_fire_key("nightly", due_at_ms=None, next_run_at_ms=DUE, fired_at_ms=DUE + 45_000)

    assert first.key == again.key


def test_the_next_due_is_never_swallowed_by_the_previous_one() -> None:
    """W22; #118: different dues always get different keys."""
    assert cron_dedup_key("hourly", DUE) != cron_dedup_key("hourly", DUE + 3_600_000)


def test_a_caller_given_due_time_is_the_key() -> None:
    """W22 table row 1: the due the caller fires for wins over the schedule's next_run_at."""
    key = cron_fire_key("nightly", due_at_ms=DUE, next_run_at_ms=DUE + 86_400_000, fired_at_ms=0)

    assert key == ScheduleKey(f"sched:nightly:due:{DUE}", KeySource.DUE_AT, DUE)


def test_without_a_caller_due_the_schedules_next_run_at_is_the_key() -> None:
    """W22 table row 2: due_ms is this fire's due time, the schedule's next_run_at."""
    key = cron_fire_key("nightly", due_at_ms=None, next_run_at_ms=DUE, fired_at_ms=DUE + 999)

    assert key == ScheduleKey(f"sched:nightly:due:{DUE}", KeySource.NEXT_RUN_AT, DUE)
    assert key.warning is None


def test_without_any_due_time_the_wall_clock_second_is_the_key_with_a_warning() -> None:
    """W22 table row 3: falls back to sched:{id}:fired:{wall-clock second}, with a WARNING."""
    key = cron_fire_key("nightly", due_at_ms=None, next_run_at_ms=None, fired_at_ms=12_345_678)

    assert key.key == "sched:nightly:fired:12345"
    assert key.source is KeySource.FIRED_AT
    assert key.due_ms is None
    assert key.warning is not None and "next_run_at" in key.warning
    assert DUE_MISSING_EVENT == "schedule.due_missing"


def test_a_run_now_request_gets_its_own_key() -> None:
    """W22 table row 4: manual → sched:{id}:manual:…, unique per call."""
    key = manual_fire_key("nightly", "req-7f3a")

    assert key == ScheduleKey("sched:nightly:manual:req-7f3a", KeySource.MANUAL)
    assert manual_dedup_key("nightly", "req-7f3b") != key.key


def test_run_now_in_the_same_second_as_a_due_is_not_merged_with_it() -> None:
    """W22: a manual "run now" explicitly asks for one more run; it must never merge with a cron
    fire of the same second."""
    assert manual_dedup_key("nightly", str(DUE)) != cron_dedup_key("nightly", DUE)
    assert manual_dedup_key("nightly", str(DUE // 1000)) != fired_dedup_key("nightly", DUE)


@pytest.mark.parametrize(
    "build",
    [
        lambda: cron_dedup_key("", DUE),
        lambda: cron_dedup_key("nightly", -1),
        lambda: cron_dedup_key("nightly", True),
        lambda: cron_dedup_key("nightly", 1.5),
        lambda: fired_dedup_key("nightly", -1000),
        lambda: manual_dedup_key("nightly", ""),
        lambda: manual_dedup_key("nightly", "a:due:1"),
        lambda: manual_dedup_key("", "req"),
        # W22, R4: the id rule (a '/' or a space would make the key unaddressable).
        lambda: cron_dedup_key("night/ly", DUE),
        lambda: manual_dedup_key("night ly", "req"),
    ],
)
def test_a_key_that_could_collide_or_is_empty_is_refused_with_a_named_error(build: object) -> None:
    """W22, W6: an empty id, a negative or non-integer due, or a request id with ':' could make
    two different fires share one key (one of them would never run)."""
    with pytest.raises(ScheduleDedupError):
        build()  # type: ignore[operator]


schedule_ids = valid_ids
times = st.integers(min_value=0, max_value=2**53)
request_ids = st.text(min_size=1, max_size=12).filter(lambda r: ":" not in r)
fires = st.one_of(
    st.tuples(st.just("due"), schedule_ids, times.map(str)),
    st.tuples(st.just("manual"), schedule_ids, request_ids),
    st.tuples(st.just("fired"), schedule_ids, times.map(lambda ms: str(ms // 1000))),
)


def _key(fire: tuple[str, str, str]) -> str:
    kind, schedule_id, tail = fire
    if kind == "due":
        return cron_dedup_key(schedule_id, int(tail))
    if kind == "manual":
        return manual_dedup_key(schedule_id, tail)
    return fired_dedup_key(schedule_id, int(tail) * 1000)


@given(a=fires, b=fires)
def test_keys_are_equal_only_for_the_same_schedule_kind_and_due_or_request(
    a: tuple[str, str, str], b: tuple[str, str, str]
) -> None:
    """W22 (property): cron, manual and fallback key spaces are disjoint and each key names one
    fire, even for schedule ids that contain ':'."""
    assert (_key(a) == _key(b)) is (a == b)


@given(
    schedule_id=schedule_ids,
    due_at=st.none() | times,
    next_run_at=st.none() | times,
    fired_at=times,
)
def test_a_cron_fire_key_is_total_and_warns_only_without_a_due(
    schedule_id: str, due_at: int | None, next_run_at: int | None, fired_at: int
) -> None:
    """W22 (property): every cron fire gets a key; only the fallback warns."""
    key = cron_fire_key(
        schedule_id, due_at_ms=due_at, next_run_at_ms=next_run_at, fired_at_ms=fired_at
    )

    assert key.key.startswith(f"sched:{schedule_id}:")
    assert (key.warning is not None) is (due_at is None and next_run_at is None)
    assert key.due_ms == (due_at if due_at is not None else next_run_at)
