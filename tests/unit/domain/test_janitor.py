"""The index janitor's plan, prune batches and listing pages (V7)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.janitor import (
    DEFAULT_BUDGET,
    DEFAULT_INTERVAL_SECONDS,
    LISTING_PAGE,
    MAX_BUDGET,
    MAX_INTERVAL_SECONDS,
    PRUNE_BATCH,
    JanitorPlan,
    listing_page_size,
    plan_janitor,
    prune_batches,
)


def test_the_defaults_run_every_60_seconds_with_a_budget_of_500() -> None:
    assert plan_janitor() == JanitorPlan(enabled=True, interval_seconds=60.0, budget=500)


def test_usable_settings_are_kept_without_a_warning() -> None:
    plan = plan_janitor(interval_seconds=0.25, budget=MAX_BUDGET)

    assert (plan.interval_seconds, plan.budget, plan.warnings) == (0.25, MAX_BUDGET, ())


@pytest.mark.parametrize(
    "interval",
    [
        0,
        0.0,
        -1,
        -0.5,
        math.inf,
        -math.inf,
        math.nan,
        MAX_INTERVAL_SECONDS + 1,
        10**400,
        "60",
        None,
        True,
    ],
)
def test_an_interval_that_is_not_finite_and_positive_falls_back_with_a_warning(
    interval: object,
) -> None:
    plan = plan_janitor(interval_seconds=interval)

    assert plan.enabled is True
    assert plan.interval_seconds == DEFAULT_INTERVAL_SECONDS
    [warning] = plan.warnings
    assert warning.setting == "janitor_interval_seconds"
    assert warning.used == DEFAULT_INTERVAL_SECONDS
    assert "janitor_enabled=false" in warning.message
    assert repr(interval)[:20] in warning.message


@pytest.mark.parametrize("budget", [0, -5, MAX_BUDGET + 1, 2.5, math.nan, math.inf, "500", True])
def test_a_budget_outside_1_to_max_falls_back_with_a_warning(budget: object) -> None:
    plan = plan_janitor(budget=budget)

    assert plan.budget == DEFAULT_BUDGET
    [warning] = plan.warnings
    assert warning.setting == "janitor_budget"
    assert repr(budget) in warning.message and str(MAX_BUDGET) in warning.message


def test_a_whole_float_budget_is_taken_as_its_integer() -> None:
    assert plan_janitor(budget=800.0).budget == 800


def test_disabling_warns_that_indexes_then_only_shrink_on_reads() -> None:
    plan = plan_janitor(enabled=False)

    assert plan.enabled is False
    [warning] = plan.warnings
    assert warning.setting == "janitor_enabled"
    assert "only when a listing reads them" in warning.message


def test_every_unusable_setting_is_reported_at_once() -> None:
    plan = plan_janitor(enabled=False, interval_seconds=-1, budget=0)

    assert [w.setting for w in plan.warnings] == [
        "janitor_interval_seconds",
        "janitor_budget",
        "janitor_enabled",
    ]


@given(
    interval=st.one_of(st.floats(allow_nan=True), st.integers(), st.none(), st.text()),
    budget=st.one_of(st.floats(allow_nan=True), st.integers(), st.none(), st.text()),
    enabled=st.booleans(),
)
def test_a_plan_always_has_a_finite_positive_interval_and_a_bounded_budget(
    interval: object, budget: object, enabled: bool
) -> None:
    plan = plan_janitor(enabled=enabled, interval_seconds=interval, budget=budget)

    assert math.isfinite(plan.interval_seconds) and plan.interval_seconds > 0
    assert 1 <= plan.budget <= MAX_BUDGET
    assert plan.enabled is enabled
    warned = {w.setting for w in plan.warnings}
    if "janitor_interval_seconds" in warned:
        assert plan.interval_seconds == DEFAULT_INTERVAL_SECONDS
    else:
        assert plan.interval_seconds == pytest.approx(interval)
    if "janitor_budget" in warned:
        assert plan.budget == DEFAULT_BUDGET
    else:
        assert plan.budget == budget


@given(st.lists(st.integers(), max_size=2_000))
def test_prune_batches_keep_order_and_never_exceed_500(members: list[int]) -> None:
    batches = prune_batches(members)

    assert [m for batch in batches for m in batch] == members
    assert all(1 <= len(batch) <= PRUNE_BATCH for batch in batches)
    assert len(batches) == math.ceil(len(members) / PRUNE_BATCH)


def test_a_page_is_the_limit_when_the_index_decides_the_query() -> None:
    assert listing_page_size(10, exact=True) == 10
    assert listing_page_size(10, exact=False) == LISTING_PAGE
    assert listing_page_size(2_000, exact=False) == 2_000


def test_a_page_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        listing_page_size(0, exact=True)
