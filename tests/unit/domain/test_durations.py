"""Durations: milliseconds or ISO-8601 strings, named errors, no cached failures (E1, E5)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.durations import MAX_NODE_TIMEOUT_MS, MAX_WAIT_MS, parse_duration_ms
from plaita.domain.errors import InvalidTimeoutError


def parse(value: Any, maximum_ms: int = MAX_NODE_TIMEOUT_MS) -> int:
    return parse_duration_ms(value, field="node 'a' timeout", maximum_ms=maximum_ms)


def test_node_timeouts_are_capped_at_24_hours_and_waits_at_a_leap_year() -> None:
    assert MAX_NODE_TIMEOUT_MS == 24 * 60 * 60 * 1000
    assert MAX_WAIT_MS == 366 * 24 * 60 * 60 * 1000


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (1, 1), (5000, 5000), (1500.9, 1500), (MAX_NODE_TIMEOUT_MS, MAX_NODE_TIMEOUT_MS)],
)
def test_numbers_are_milliseconds(value: float, expected: int) -> None:
    assert parse(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT5S", 5000),
        ("PT0.5S", 500),
        ("PT1M", 60_000),
        ("PT1H30M", 5_400_000),
        ("PT24H", MAX_NODE_TIMEOUT_MS),
        ("P1D", MAX_NODE_TIMEOUT_MS),
        ("PT0S", 0),
    ],
)
def test_iso_8601_strings_are_converted_to_milliseconds(text: str, expected: int) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("5000", 5000), (" 5000 ", 5000), (" PT5S\n", 5000)]
)
def test_digit_strings_are_milliseconds_and_surrounding_blanks_are_ignored(
    text: str, expected: int
) -> None:
    assert parse(text) == expected


def test_a_longer_maximum_admits_waits_beyond_24_hours() -> None:
    assert parse("P7D", maximum_ms=MAX_WAIT_MS) == 7 * MAX_NODE_TIMEOUT_MS


@pytest.mark.parametrize(
    "value",
    [-1, -5000, float("inf"), float("-inf"), float("nan"), True, False, None, [5000], {"ms": 1}],
)
def test_negative_non_finite_and_non_numeric_values_raise_invalid_timeout(value: Any) -> None:
    with pytest.raises(InvalidTimeoutError):
        parse(value)


@pytest.mark.parametrize("value", [-0.5, -0.001])
def test_fractional_negative_milliseconds_raise_invalid_timeout(value: float) -> None:
    with pytest.raises(InvalidTimeoutError):
        parse(value)


@pytest.mark.parametrize(
    "value", [MAX_NODE_TIMEOUT_MS + 1, "PT24H1S", "PT25H", "P2D", str(MAX_NODE_TIMEOUT_MS + 1)]
)
def test_values_over_the_maximum_raise_invalid_timeout(value: Any) -> None:
    with pytest.raises(InvalidTimeoutError, match="exceeds the maximum"):
        parse(value)


@pytest.mark.parametrize(
    "text", ["", "   ", "P", "PT", "PTXS", "PT-5S", "-PT5S", "5s", "5 seconds", "1.5", "-1", "T5S"]
)
def test_unparseable_strings_raise_invalid_timeout(text: str) -> None:
    with pytest.raises(InvalidTimeoutError):
        parse(text)


def test_error_names_the_field() -> None:
    with pytest.raises(InvalidTimeoutError, match="node 'a' timeout"):
        parse(-1)


@pytest.mark.parametrize("text", ["PTXS", "5 seconds", "P"])
def test_an_invalid_string_raises_on_every_call(text: str) -> None:
    """The parse memo must never store a failure: each call raises again (E5)."""
    for _ in range(3):
        with pytest.raises(InvalidTimeoutError):
            parse(text)


def test_the_same_invalid_string_names_each_callers_field() -> None:
    with pytest.raises(InvalidTimeoutError, match="first"):
        parse_duration_ms("PTXS", field="first")
    with pytest.raises(InvalidTimeoutError, match="second"):
        parse_duration_ms("PTXS", field="second")


def test_a_valid_string_parses_the_same_on_every_call() -> None:
    assert [parse("PT5S") for _ in range(3)] == [5000, 5000, 5000]


def test_the_maximum_is_checked_on_every_call_even_for_a_memoised_string() -> None:
    assert parse("P2D", maximum_ms=MAX_WAIT_MS) == 2 * MAX_NODE_TIMEOUT_MS
    with pytest.raises(InvalidTimeoutError):
        parse("P2D")


@pytest.mark.parametrize("text", ["²", "5²", "①"])
def test_unicode_digits_int_cannot_read_raise_invalid_timeout(text: str) -> None:
    with pytest.raises(InvalidTimeoutError):
        parse(text)


def test_a_huge_digit_string_raises_invalid_timeout() -> None:
    with pytest.raises(InvalidTimeoutError):
        parse("9" * 5000)


@given(st.integers(min_value=0, max_value=MAX_NODE_TIMEOUT_MS))
def test_any_millisecond_count_within_the_maximum_is_returned_unchanged(ms: int) -> None:
    assert parse(ms) == ms
    assert parse(str(ms)) == ms


@given(st.integers(min_value=0, max_value=24 * 60 * 60))
def test_iso_seconds_are_a_thousand_milliseconds_each(seconds: int) -> None:
    assert parse(f"PT{seconds}S") == seconds * 1000


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=30))
def test_any_ascii_text_parses_within_bounds_or_raises_invalid_timeout(text: str) -> None:
    try:
        ms = parse(text)
    except InvalidTimeoutError:
        return
    assert 0 <= ms <= MAX_NODE_TIMEOUT_MS
