"""The reconciler's window, cursor, paging and cadence rules (V5)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plaita.domain.errors import InvalidConfigurationError
from plaita.domain.events import MAX_LISTING_LIMIT
from plaita.domain.reconcile import (
    MAX_RETRY_DELAY_MS,
    InvalidReconcileSettingsError,
    PageRequest,
    ReconcilePageOverflowError,
    ReconcileSettings,
    delay_before_next_round_ms,
    first_page,
    next_page,
    plan_window,
    seconds_to_ms,
)

NOW = 1_700_000_000_000
SETTINGS = ReconcileSettings(
    lookback_ms=3_600_000, overlap_ms=10_000, settle_ms=5_000, max_span_ms=3_600_000
)

# --- settings ---------------------------------------------------------------------------


def test_default_settings_are_valid() -> None:
    defaults = ReconcileSettings()
    assert (defaults.lookback_ms, defaults.overlap_ms, defaults.settle_ms) == (
        3_600_000,
        10_000,
        5_000,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lookback_ms", -1),
        ("overlap_ms", -5),
        ("settle_ms", 1.5),
        ("max_span_ms", 0),
        ("lookback_ms", True),
        ("page_size", 0),
        ("page_size", MAX_LISTING_LIMIT // 2 + 1),
    ],
)
def test_unusable_settings_are_named(field: str, value: object) -> None:
    with pytest.raises(InvalidReconcileSettingsError, match=field):
        ReconcileSettings(**{field: value})  # type: ignore[arg-type]


def test_every_bad_setting_is_listed_at_once() -> None:
    with pytest.raises(InvalidReconcileSettingsError) as raised:
        ReconcileSettings(lookback_ms=-1, settle_ms=-1, page_size=0)
    message = str(raised.value)
    assert "lookback_ms" in message and "settle_ms" in message and "page_size" in message
    # Start-up code catches every configuration problem under one family.
    assert isinstance(raised.value, InvalidConfigurationError)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0, 0, 0.0, 0.0001, "30"])
def test_an_interval_must_be_finite_and_positive(value: object) -> None:
    with pytest.raises(InvalidReconcileSettingsError, match="--reconcile-interval-seconds"):
        seconds_to_ms("--reconcile-interval-seconds", value, allow_zero=False)


def test_seconds_become_milliseconds() -> None:
    assert seconds_to_ms("interval", 1.5, allow_zero=False) == 1500
    assert seconds_to_ms("interval", 30, allow_zero=False) == 30_000
    assert seconds_to_ms("lookback", 0, allow_zero=True) == 0
    with pytest.raises(InvalidReconcileSettingsError, match="lookback"):
        seconds_to_ms("lookback", math.nan, allow_zero=True)


# --- the window -------------------------------------------------------------------------


def test_the_first_round_looks_back_from_now_and_leaves_fresh_events_alone() -> None:
    window = plan_window(None, NOW, SETTINGS)
    assert (window.since_ms, window.until_ms) == (NOW - 3_600_000, NOW - 5_000)
    assert window.cursor_after_ms == NOW - 5_000
    assert window.caught_up and not window.is_empty


def test_a_later_round_starts_an_overlap_before_the_cursor() -> None:
    cursor = NOW - 30_000
    window = plan_window(cursor, NOW, SETTINGS)
    assert (window.since_ms, window.until_ms) == (cursor - 10_000, NOW - 5_000)
    assert window.cursor_after_ms == NOW - 5_000


def test_a_long_outage_is_caught_up_in_capped_rounds() -> None:
    cursor = NOW - 10 * 3_600_000
    window = plan_window(cursor, NOW, SETTINGS)
    assert window.until_ms == cursor + 3_600_000
    assert window.cursor_after_ms == cursor + 3_600_000
    assert not window.caught_up


def test_a_cursor_ahead_of_the_clock_gives_an_empty_round_and_never_moves_back() -> None:
    cursor = NOW + 60_000  # another filter's clock, or this one went back
    window = plan_window(cursor, NOW, SETTINGS)
    assert window.is_empty
    assert window.cursor_after_ms == cursor


def test_a_first_round_without_lookback_records_where_it_began() -> None:
    no_lookback = ReconcileSettings(lookback_ms=0, settle_ms=5_000)
    window = plan_window(None, NOW, no_lookback)
    assert window.is_empty
    assert window.cursor_after_ms == NOW
    later = plan_window(window.cursor_after_ms, NOW + 20_000, no_lookback)
    assert not later.is_empty
    assert later.since_ms <= NOW < later.until_ms


@settings(max_examples=200)
@given(
    steps=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200_000), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    lookback=st.integers(min_value=0, max_value=100_000),
    overlap=st.integers(min_value=0, max_value=20_000),
    settle=st.integers(min_value=0, max_value=20_000),
    span=st.integers(min_value=1, max_value=100_000),
)
def test_successful_rounds_cover_time_without_gaps(
    steps: list[tuple[int, bool]], lookback: int, overlap: int, settle: int, span: int
) -> None:
    """Every millisecond from the first round's start to the stored cursor was inside the
    window of a round that succeeded; no window reaches unsettled events; the cursor never
    moves back, and only successful rounds move it."""
    config = ReconcileSettings(
        lookback_ms=lookback, overlap_ms=overlap, settle_ms=settle, max_span_ms=span
    )
    now = NOW
    cursor: int | None = None
    origin: int | None = None
    covered: list[tuple[int, int]] = []
    for elapsed, succeeds in steps:
        now += elapsed
        window = plan_window(cursor, now, config)
        assert window.since_ms <= window.until_ms <= max(now - settle, window.since_ms)
        assert cursor is None or window.cursor_after_ms >= cursor
        if not succeeds:
            continue
        if origin is None:
            origin = window.start_ms  # a failed first round stored nothing to start from
        if not window.is_empty:
            covered.append((window.since_ms, window.until_ms))
        cursor = window.cursor_after_ms
    if cursor is None or origin is None:
        return
    reached = origin
    for since, until in sorted(covered):
        assert since <= reached, f"gap [{reached}, {since}) was never replayed"
        reached = max(reached, until)
    assert reached >= cursor


# --- paging -----------------------------------------------------------------------------


def _list(
    stored: Sequence[tuple[int, str]], request: PageRequest, order: st.DataObject | None
) -> list[tuple[int, str]]:
    """A listing as the port answers it: the window, oldest first, at most ``limit``.

    With ``order``, events of one millisecond come in an arbitrary order each time.
    """
    inside = [e for e in stored if request.since_ms <= e[0] < request.until_ms]
    if order is None:
        inside.sort()
    else:
        inside = sorted(order.draw(st.permutations(inside)), key=lambda e: e[0])
    return inside[: request.limit]


def _replay_all(
    stored: Sequence[tuple[int, str]],
    since: int,
    until: int,
    page_size: int,
    order: st.DataObject | None = None,
) -> tuple[list[str], int]:
    request: PageRequest | None = PageRequest(since, until, page_size)
    replayed: list[str] = []
    pages = 0
    while request is not None:
        page = _list(stored, request, order)
        pages += 1
        replayed += [event_id for _, event_id in page if event_id not in request.skip]
        request = next_page(request, page, page_size)
    return replayed, pages


@settings(max_examples=200)
@given(
    timestamps=st.lists(st.integers(min_value=0, max_value=30), max_size=60),
    page_size=st.integers(min_value=1, max_value=7),
    shuffled=st.booleans(),
    data=st.data(),
)
def test_paging_replays_every_event_of_the_window_once_and_ends(
    timestamps: list[int], page_size: int, shuffled: bool, data: st.DataObject
) -> None:
    """Many events share a millisecond here, and the port may order them differently on
    every call: each event of the window is still filtered exactly once."""
    stored = [(ts, f"e{i:03d}") for i, ts in enumerate(timestamps)]
    replayed, pages = _replay_all(stored, 5, 25, page_size, data if shuffled else None)
    expected = sorted(event_id for ts, event_id in stored if 5 <= ts < 25)
    assert sorted(replayed) == expected
    assert pages <= len(expected) // page_size + 1


def test_a_short_page_is_the_last() -> None:
    request = first_page(plan_window(None, NOW, SETTINGS), 3)
    assert next_page(request, [(1, "a"), (2, "b")], 3) is None


def test_the_next_page_starts_at_the_newest_millisecond_and_skips_what_it_saw() -> None:
    request = PageRequest(since_ms=0, until_ms=100, limit=3)
    following = next_page(request, [(1, "a"), (7, "b"), (7, "c")], 3)
    assert following == PageRequest(since_ms=7, until_ms=100, limit=5, skip=frozenset({"b", "c"}))
    # A page that is all one millisecond keeps what the earlier pages skipped there too.
    again = next_page(following, [(7, "b"), (7, "c"), (7, "d"), (7, "e"), (7, "f")], 3)
    assert again is not None
    assert again.skip == frozenset("bcdef") and again.limit == 8


def test_too_many_events_in_one_millisecond_is_a_named_error() -> None:
    crowded = [(42, f"e{i}") for i in range(MAX_LISTING_LIMIT // 2)]
    request = PageRequest(since_ms=42, until_ms=100, limit=len(crowded), skip=frozenset())
    with pytest.raises(ReconcilePageOverflowError, match="millisecond 42"):
        next_page(request, crowded, MAX_LISTING_LIMIT // 2 + 1)


# --- cadence ----------------------------------------------------------------------------


def test_rounds_follow_the_interval_and_at_once_while_catching_up() -> None:
    assert delay_before_next_round_ms(30_000, consecutive_failures=0) == 30_000
    assert delay_before_next_round_ms(30_000, consecutive_failures=0, caught_up=False) == 0


def test_failed_rounds_back_off_up_to_a_cap() -> None:
    delays = [delay_before_next_round_ms(30_000, consecutive_failures=n) for n in range(1, 8)]
    assert delays[:3] == [60_000, 120_000, 240_000]
    assert delays[-1] == MAX_RETRY_DELAY_MS
    # An interval longer than the cap is never shortened by failing.
    assert delay_before_next_round_ms(600_000, consecutive_failures=3) == 600_000


@given(
    interval=st.integers(min_value=1, max_value=10**7),
    failures=st.integers(min_value=1, max_value=10_000),
)
def test_retry_delays_never_shrink_and_stay_bounded(interval: int, failures: int) -> None:
    delay = delay_before_next_round_ms(interval, consecutive_failures=failures)
    following = delay_before_next_round_ms(interval, consecutive_failures=failures + 1)
    assert interval <= delay <= following <= max(interval, MAX_RETRY_DELAY_MS)
