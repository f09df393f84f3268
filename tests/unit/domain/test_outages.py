"""Store outages of background loops: capped back-off, one start and one end per outage.

situation                                              -> answer
n-th failure in a row                                  -> wait min(cap, base * 2^(n-1))
first failure while the store was healthy              -> an outage starts (announced)
any later failure, of any loop                         -> counted, not announced
success of a loop that failed, others still failing    -> the outage goes on
success of the last loop that failed                   -> the outage ends (count, duration)
success with no outage, or of a loop that never failed -> nothing
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.outages import Backoff, OutageEnded, StoreHealth


def test_the_back_off_doubles_from_its_base_up_to_its_cap() -> None:
    backoff = Backoff(base_ms=100, cap_ms=5_000)
    assert [backoff.delay_ms(n) for n in range(9)] == [
        0,
        100,
        200,
        400,
        800,
        1600,
        3200,
        5000,
        5000,
    ]
    assert backoff.delay_ms(10**9) == 5_000


@pytest.mark.parametrize(("base_ms", "cap_ms"), [(0, 100), (-1, 100), (200, 100)])
def test_a_back_off_without_a_positive_base_below_its_cap_is_refused(
    base_ms: int, cap_ms: int
) -> None:
    with pytest.raises(ValueError, match="base_ms"):
        Backoff(base_ms=base_ms, cap_ms=cap_ms)


@given(
    base=st.integers(1, 10_000),
    extra=st.integers(0, 100_000),
    failures=st.integers(0, 10_000),
)
def test_the_back_off_never_shrinks_and_never_passes_its_cap(
    base: int, extra: int, failures: int
) -> None:
    backoff = Backoff(base_ms=base, cap_ms=base + extra)
    assert 0 <= backoff.delay_ms(failures) <= backoff.delay_ms(failures + 1) <= base + extra


def test_the_first_failure_of_a_healthy_store_starts_an_outage() -> None:
    seen = StoreHealth().failed("timers", now_ms=1_000)
    assert seen.started
    assert seen.health.outage is not None and seen.health.outage.failures == {"timers": 1}


def test_later_failures_of_any_loop_are_counted_not_announced() -> None:
    health = StoreHealth().failed("timers", now_ms=1_000).health
    again = health.failed("timers", now_ms=1_100)
    other = again.health.failed("read", now_ms=1_200)
    assert not again.started and not other.started
    outage = other.health.outage
    assert outage is not None
    assert (outage.failures, outage.failing, outage.total) == (
        {"timers": 2, "read": 1},
        frozenset({"timers", "read"}),
        3,
    )


def test_the_outage_goes_on_while_another_loop_that_failed_has_not_worked_again() -> None:
    health = StoreHealth().failed("timers", now_ms=0).health.failed("read", now_ms=10).health
    seen = health.succeeded("timers", now_ms=500)
    assert seen.ended is None
    assert seen.health.outage is not None and seen.health.outage.failing == {"read"}


def test_the_success_of_the_last_failing_loop_ends_the_outage_with_count_and_duration() -> None:
    health = StoreHealth().failed("timers", now_ms=1_000).health
    health = health.failed("read", now_ms=1_500).health.failed("read", now_ms=2_000).health
    health = health.succeeded("read", now_ms=3_000).health
    seen = health.succeeded("timers", now_ms=4_250)
    assert seen.ended == OutageEnded({"timers": 1, "read": 2}, 3_250)
    assert seen.ended.total == 3
    assert seen.health == StoreHealth()


def test_successes_without_an_outage_or_of_loops_that_never_failed_change_nothing() -> None:
    assert StoreHealth().succeeded("timers", now_ms=5) == StoreHealth().succeeded("x", now_ms=9)
    assert StoreHealth().succeeded("timers", now_ms=5).ended is None
    health = StoreHealth().failed("timers", now_ms=0).health
    seen = health.succeeded("gauges", now_ms=10)
    assert seen.ended is None and seen.health == health
