"""Execution budgets and attempt limits (E3, E5; #267, #71).

Budget table (``execution_budget_ms``):

  flow timeout  caller timeout  -> budget
  -             -               -> default deadline (1800 s unless configured)
  f             -               -> f
  -             c               -> c
  f             c               -> min(f, c)
  0 anywhere                    -> 0 (zero is a zero budget, not "no limit")

Attempt table (``attempt_limit``):

  remaining   node timeout    -> limit       bound
  -           -               -> none        UNBOUNDED
  -           n               -> n           NODE
  r           -               -> r           DEADLINE
  r < n                       -> r           DEADLINE
  r >= n                      -> n           NODE (a tie is the node's)
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.timeouts import (
    DEFAULT_EXECUTION_DEADLINE_MS,
    AttemptBound,
    AttemptLimit,
    attempt_limit,
    backoff_within_budget,
    deadline_at,
    execution_budget_ms,
    remaining_ms,
)

ms = st.integers(min_value=0, max_value=366 * 24 * 3600 * 1000)
optional_ms = st.none() | ms


# --- the execution budget -----------------------------------------------------------------------


def test_without_any_timeout_the_default_deadline_of_1800_s_applies() -> None:
    """E5; #267: no timeout no longer means unlimited."""
    assert execution_budget_ms(None, None) == DEFAULT_EXECUTION_DEADLINE_MS == 1_800_000


def test_a_configured_default_deadline_replaces_1800_s() -> None:
    """E5: PLAITA_EXECUTION_DEADLINE_SECONDS."""
    assert execution_budget_ms(None, None, default_deadline_ms=60_000) == 60_000


def test_the_flow_timeout_alone_is_the_budget_even_above_the_default() -> None:
    """E5: explicit config wins over the default deadline, in both directions."""
    assert execution_budget_ms(7_200_000, None) == 7_200_000


def test_the_caller_timeout_alone_is_the_budget() -> None:
    """E5; #71: the caller's timeout reaches the strategy."""
    assert execution_budget_ms(None, 5_000) == 5_000


@pytest.mark.parametrize(("flow", "caller"), [(3_000, 9_000), (9_000, 3_000)])
def test_flow_and_caller_timeouts_merge_to_the_stricter(flow: int, caller: int) -> None:
    """E5: of the flow's timeout and the caller's, the stricter wins."""
    assert execution_budget_ms(flow, caller) == 3_000


@pytest.mark.parametrize(
    ("flow", "caller", "default"), [(0, None, 1_800_000), (None, 0, 1_800_000), (None, None, 0)]
)
def test_zero_is_a_zero_budget_never_unlimited(
    flow: int | None, caller: int | None, default: int
) -> None:
    """E5: explicit configuration wins, and 0 is still a zero budget."""
    assert execution_budget_ms(flow, caller, default_deadline_ms=default) == 0


@given(flow=optional_ms, caller=optional_ms, default=ms)
def test_the_merged_budget_is_never_above_an_explicit_timeout(
    flow: int | None, caller: int | None, default: int
) -> None:
    """E5 (property): merged ≤ each explicit input; the default only when neither is given."""
    budget = execution_budget_ms(flow, caller, default_deadline_ms=default)

    for explicit in (flow, caller):
        if explicit is not None:
            assert budget <= explicit
    if flow is None and caller is None:
        assert budget == default
    else:
        assert budget in (flow, caller)
    if 0 in (flow, caller):
        assert budget == 0


# --- remaining budget ----------------------------------------------------------------------------


def test_an_unbounded_run_has_no_deadline_and_no_remaining_budget() -> None:
    assert deadline_at(10.0, None) is None
    assert remaining_ms(None, 99.0) is None


def test_the_remaining_budget_counts_down_and_stops_at_zero() -> None:
    """E5: the budget spent by nodes and backoffs alike; never negative."""
    deadline = deadline_at(100.0, 1_500)

    assert deadline == 101.5
    assert remaining_ms(deadline, 100.5) == pytest.approx(1_000)
    assert remaining_ms(deadline, 101.5) == 0.0
    assert remaining_ms(deadline, 500.0) == 0.0


# --- one attempt (one test per row) -------------------------------------------------------------


def test_without_node_timeout_or_deadline_an_attempt_is_unbounded() -> None:
    limit = attempt_limit(None, None)

    assert limit == AttemptLimit(None, AttemptBound.UNBOUNDED)
    assert limit.timeout_seconds is None
    assert not limit.deadline_bound and not limit.deadline_spent


def test_without_deadline_the_node_timeout_bounds_the_attempt() -> None:
    """E3: expiry goes to the node's timeoutHandler."""
    limit = attempt_limit(None, 5_000)

    assert limit == AttemptLimit(5_000, AttemptBound.NODE)
    assert limit.timeout_seconds == 5.0


def test_without_node_timeout_the_remaining_budget_bounds_the_attempt() -> None:
    """E5: expiry is ExecutionDeadlineError, not the timeoutHandler."""
    assert attempt_limit(2_500.0, None) == AttemptLimit(2_500.0, AttemptBound.DEADLINE)


def test_a_budget_shorter_than_the_node_timeout_bounds_the_attempt() -> None:
    """E3: each attempt's timeout = min(node timeout, remaining budget); the deadline decides."""
    limit = attempt_limit(1_000.0, 5_000)

    assert limit == AttemptLimit(1_000.0, AttemptBound.DEADLINE)
    assert limit.deadline_bound


@pytest.mark.parametrize("remaining", [5_000.0, 9_000.0])
def test_a_node_timeout_within_the_budget_bounds_the_attempt(remaining: float) -> None:
    """E3: a tie is the node's own timeout, so its timeoutHandler still applies."""
    assert attempt_limit(remaining, 5_000) == AttemptLimit(5_000, AttemptBound.NODE)


def test_a_spent_budget_is_raised_as_deadline_before_the_attempt() -> None:
    """E5; #267: the runner raises ExecutionDeadlineError instead of trying."""
    assert attempt_limit(0.0, 5_000).deadline_spent
    assert attempt_limit(0.0, None).deadline_spent


def test_a_zero_node_timeout_is_not_the_deadline() -> None:
    """E3: a node's own zero timeout times out into its timeoutHandler, not the deadline."""
    limit = attempt_limit(None, 0)

    assert limit.bound is AttemptBound.NODE
    assert not limit.deadline_spent
    assert not attempt_limit(0.0, 0).deadline_spent


@given(remaining=st.none() | st.floats(0, 1e12), node=optional_ms)
def test_an_attempt_is_never_longer_than_the_node_timeout_or_the_budget(
    remaining: float | None, node: int | None
) -> None:
    """E3, E5 (property): the limit is the stricter input, and the deadline bounds it exactly
    when the budget is strictly shorter than the node timeout (or there is none)."""
    limit = attempt_limit(remaining, node)

    for bound in (remaining, node):
        if bound is not None:
            assert limit.limit_ms is not None and limit.limit_ms <= bound
    assert limit.deadline_bound is (remaining is not None and (node is None or remaining < node))
    assert (limit.limit_ms is None) is (limit.bound is AttemptBound.UNBOUNDED)


# --- backoff --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "remaining", "expected"),
    [(4.0, None, 4.0), (4.0, 10_000.0, 4.0), (4.0, 1_500.0, 1.5), (4.0, 0.0, 0.0)],
)
def test_a_backoff_is_cut_to_the_remaining_budget(
    delay: float, remaining: float | None, expected: float
) -> None:
    """E3; #267: the backoff counts against the execution's budget too."""
    assert backoff_within_budget(delay, remaining) == expected
