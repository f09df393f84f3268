"""Cron expressions in a time zone (W22): which instants they name, across DST transitions.

DST table (``Cron`` in a zone, each wall-clock time the expression names fires at most once):

  zone            day (transition)            expression    fires (UTC)
  Europe/Berlin   2026-03-29 02:00 -> 03:00   30 2 * * *    01:00 (03:00 local: after the gap)
  Europe/Berlin   2026-03-29 02:00 -> 03:00   0 * * * *     00:00, 01:00 (no 02:00 local)
  Europe/Berlin   2026-10-25 03:00 -> 02:00   30 2 * * *    00:30 only (the first 02:30)
  Europe/Berlin   2026-10-25 03:00 -> 02:00   0 * * * *     00:00, 02:00 (02:00 local once)
  Australia/Sydney 2026-04-05 03:00 -> 02:00  30 2 * * *    15:30 (04-04) only
  UTC             every day                   30 2 * * *    02:30
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plaita.domain.cron import Cron, validate_timezone
from plaita.domain.errors import InvalidCronExpressionError, UnknownTimeZoneError


def ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def utc(milliseconds: int) -> str:
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC).strftime("%m-%d %H:%M:%S")


def cron(expression: str, timezone: str = "UTC", hash_id: str = "nightly") -> Cron:
    return Cron.parse(expression, timezone, hash_id=hash_id)


# --- reading expressions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 3 * * *", ms(2026, 1, 1), ["01-01 03:00:00", "01-02 03:00:00", "01-03 03:00:00"]),
        ("*/15 * * * *", ms(2026, 1, 1), ["01-01 00:15:00", "01-01 00:30:00", "01-01 00:45:00"]),
        # Six fields: the sixth is seconds.
        ("* * * * * *", ms(2026, 1, 1), ["01-01 00:00:01", "01-01 00:00:02", "01-01 00:00:03"]),
        ("* * * * * */10", ms(2026, 1, 1), ["01-01 00:00:10", "01-01 00:00:20", "01-01 00:00:30"]),
        ("@hourly", ms(2026, 1, 1), ["01-01 01:00:00", "01-01 02:00:00", "01-01 03:00:00"]),
        ("0 9 * * mon-fri", ms(2026, 1, 2), ["01-02 09:00:00", "01-05 09:00:00", "01-06 09:00:00"]),
    ],
)
def test_an_expression_names_the_times_it_reads(
    expression: str, after: int, expected: list[str]
) -> None:
    assert [utc(due) for due in cron(expression).next_runs(after, 3)] == expected


def test_spaces_around_and_between_fields_do_not_matter() -> None:
    assert cron("  0   3 * *  * ").expression == "0 3 * * *"


def test_a_hashed_field_is_the_same_on_every_replica_and_differs_between_schedules() -> None:
    """H is hashed from the schedule id: every scheduler computes the same dues."""
    first = cron("H * * * *", hash_id="nightly").next_runs(ms(2026, 1, 1), 3)
    again = cron("H * * * *", hash_id="nightly").next_runs(ms(2026, 1, 1), 3)
    others = {
        tuple(cron("H * * * *", hash_id=f"s{n}").next_runs(ms(2026, 1, 1), 1)) for n in range(20)
    }

    assert first == again
    assert len(others) > 1


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "   ",
        "bad",
        "61 * * * *",
        "* * 32 * *",
        "* * * 13 *",
        "*/0 * * * *",
        "* * * * * * * *",
        "@reboot",
        "R * * * *",
        "0 R(0-5) * * *",
        "r/5 * * * *",
        "* " * 200,
        None,
        42,
    ],
)
def test_an_expression_that_cannot_be_read_is_refused_by_name(expression: object) -> None:
    with pytest.raises(InvalidCronExpressionError) as raised:
        Cron.parse(expression, "UTC", hash_id="nightly")

    assert raised.value.setting == "cron"


def test_a_random_field_is_refused_saying_why() -> None:
    """Two replicas would draw different minutes for one schedule."""
    with pytest.raises(InvalidCronExpressionError, match="random"):
        cron("R * * * *")


@pytest.mark.parametrize(
    ("timezone", "hint"),
    [
        ("Mars/Olympus", "not a time zone"),
        ("utc", "did you mean 'UTC'"),
        ("europe/berlin", "did you mean 'Europe/Berlin'"),
        ("../etc/passwd", "not a time zone"),
        ("localtime", "this machine's own zone"),
        ("", "IANA"),
        (None, "IANA"),
    ],
)
def test_an_unknown_time_zone_is_refused_by_name(timezone: object, hint: str) -> None:
    with pytest.raises(UnknownTimeZoneError, match=hint) as raised:
        validate_timezone(timezone)

    assert raised.value.setting == "timezone"


def test_an_expression_past_its_last_year_names_no_next_time() -> None:
    """Seven fields: the seventh is the year."""
    ended = cron("0 0 1 1 * 0 2020")

    assert ended.next_after(ms(2026, 1, 1)) is None
    assert ended.next_runs(ms(2026, 1, 1), 3) == []


# --- time zones and DST -------------------------------------------------------------------


def fires_on(expression: str, timezone: str, start: int) -> list[str]:
    """Every due in the 12 hours from ``start``, as UTC times."""
    dues, truncated = cron(expression, timezone).dues_between(start - 1, start + 43_200_000, 100)
    assert not truncated
    return [utc(due) for due in dues]


@pytest.mark.parametrize(
    ("timezone", "day_start", "expression", "expected"),
    [
        # Spring forward, Berlin: 02:00 CET becomes 03:00 CEST (2026-03-29 01:00 UTC).
        ("Europe/Berlin", ms(2026, 3, 28, 23), "30 2 * * *", ["03-29 01:00:00"]),
        (
            "Europe/Berlin",
            ms(2026, 3, 28, 23),
            "0 0-4 * * *",
            ["03-28 23:00:00", "03-29 00:00:00", "03-29 01:00:00", "03-29 02:00:00"],
        ),
        # Fall back, Berlin: 03:00 CEST becomes 02:00 CET (2026-10-25 01:00 UTC).
        ("Europe/Berlin", ms(2026, 10, 24, 22), "30 2 * * *", ["10-25 00:30:00"]),
        (
            "Europe/Berlin",
            ms(2026, 10, 24, 22),
            "0 0-4 * * *",
            [
                "10-24 22:00:00",
                "10-24 23:00:00",
                "10-25 00:00:00",
                "10-25 02:00:00",
                "10-25 03:00:00",
            ],
        ),
        # Fall back in the southern hemisphere: Sydney, 2026-04-05 03:00 AEDT -> 02:00 AEST.
        ("Australia/Sydney", ms(2026, 4, 4, 13), "30 2 * * *", ["04-04 15:30:00"]),
        ("UTC", ms(2026, 10, 25), "30 2 * * *", ["10-25 02:30:00"]),
    ],
)
def test_each_wall_clock_time_fires_at_most_once_across_dst(
    timezone: str, day_start: int, expression: str, expected: list[str]
) -> None:
    """W22 DST table (module docstring): a missing local time fires after the gap, a repeated
    one fires once, at its first occurrence."""
    assert fires_on(expression, timezone, day_start) == expected


def test_a_daily_schedule_in_a_zone_fires_once_a_day_through_a_whole_year() -> None:
    daily = cron("30 2 * * *", "Europe/Berlin")

    runs = daily.next_runs(ms(2026, 1, 1), 365)

    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    days = {datetime.fromtimestamp(run / 1000, tz=UTC).astimezone(berlin).date() for run in runs}
    assert len(runs) == len(days) == 365


# --- walking windows ------------------------------------------------------------------------


def test_a_window_holds_its_end_but_not_its_start() -> None:
    minutely = cron("* * * * *")
    start = ms(2026, 1, 1, 0, 0)

    dues, truncated = minutely.dues_between(start, start + 180_000, 10)

    assert [utc(d) for d in dues] == ["01-01 00:01:00", "01-01 00:02:00", "01-01 00:03:00"]
    assert truncated is False


def test_a_window_longer_than_the_limit_keeps_the_newest_and_says_so() -> None:
    """A schedule idle for a year costs a bounded walk from now, not a year of dues."""
    every_second = cron("* * * * * *")
    now = ms(2026, 6, 1)

    dues, truncated = every_second.dues_between(now - 365 * 86_400_000, now, 5)

    assert dues == [now - 4000, now - 3000, now - 2000, now - 1000, now]
    assert truncated is True


def test_an_empty_or_backward_window_has_no_dues() -> None:
    assert cron("* * * * * *").dues_between(ms(2026, 1, 1), ms(2026, 1, 1), 10) == ([], False)
    assert cron("* * * * * *").dues_between(ms(2026, 1, 2), ms(2026, 1, 1), 10) == ([], False)


@settings(max_examples=25, deadline=None)
@given(
    expression=st.sampled_from(["*/7 * * * *", "0 * * * *", "30 2 * * *", "15 1-3 * * sun"]),
    timezone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney"]),
    start=st.integers(min_value=ms(2026, 1, 1), max_value=ms(2027, 1, 1)),
    hours=st.integers(min_value=1, max_value=30),
)
def test_walking_back_from_now_finds_what_walking_forward_finds(
    expression: str, timezone: str, start: int, hours: int
) -> None:
    """W22 (property): the scheduler walks back from now, ``show`` walks forward; both must
    name the same dues, DST days included."""
    schedule = cron(expression, timezone)
    end = start + hours * 3_600_000
    forward = [due for due in schedule.next_runs(start, 1000) if due <= end]

    backward, truncated = schedule.dues_between(start, end, 1000)

    assert not truncated
    assert backward == forward
    assert all(due % 1000 == 0 for due in backward)
