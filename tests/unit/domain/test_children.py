"""Child executions (E13, E14): ids derived from the parent, and a map's progress — bounded
concurrency, repeated completions without effect, ``fail`` and ``collect``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.children import (
    MAX_MAP_CONCURRENCY,
    MAX_MAP_ITEMS,
    MapProgress,
    OnItemError,
    begin_map,
    child_ended,
    child_execution_id,
)
from plaita.domain.failures import DeterministicNodeError, InvalidMapError
from plaita.domain.ids import id_problem


@pytest.mark.parametrize(
    ("parent", "node", "index", "child"),
    [
        ("order-7", "kyc", None, "order-7.kyc"),
        ("order-7", "each", 0, "order-7.each.0"),
        ("order-7", "each", 9999, "order-7.each.9999"),
    ],
)
def test_a_child_id_reads_as_parent_node_and_index(
    parent: str, node: str, index: int | None, child: str
) -> None:
    assert child_execution_id(parent, node, index) == child


@pytest.mark.parametrize(
    ("parent", "node", "index"),
    [("order-7", "check kyc", None), ("order-7", "über/node", 3), ("x" * 125, "kyc", 12)],
)
def test_an_id_the_rule_refuses_is_replaced_by_a_stable_digest(
    parent: str, node: str, index: int | None
) -> None:
    child = child_execution_id(parent, node, index)
    assert child.startswith("child.") and id_problem(child) is None
    assert child == child_execution_id(parent, node, index)
    assert child != child_execution_id(parent, node, (index or 0) + 1)


def test_children_of_one_parent_never_share_an_id() -> None:
    ids = {child_execution_id("p", "each", i) for i in range(1000)}
    ids |= {child_execution_id("p", "kyc"), child_execution_id("p", "each")}
    assert len(ids) == 1002


def test_a_map_starts_at_most_its_concurrency_then_one_per_completion() -> None:
    step = begin_map(5, concurrency=2, on_item_error=OnItemError.FAIL)
    assert step.start == range(0, 2) and step.progress.running == 2
    step = child_ended(step.progress, ok=True, first_time=True)
    assert step.start == range(2, 3) and step.progress.running == 2
    for _ in range(4):
        step = child_ended(step.progress, ok=True, first_time=True)
    assert step.progress.finished and step.progress.succeeded == 5
    assert step.progress.started == 5 and step.start == range(0)


def test_an_empty_list_is_finished_at_once() -> None:
    step = begin_map(0, concurrency=10, on_item_error=OnItemError.COLLECT)
    assert step.start == range(0) and step.progress.finished


def test_a_repeated_completion_changes_nothing() -> None:
    step = begin_map(3, concurrency=1, on_item_error=OnItemError.COLLECT)
    once = child_ended(step.progress, ok=True, first_time=True)
    again = child_ended(once.progress, ok=True, first_time=False)
    assert again.progress == once.progress and again.start == range(0)


def test_collect_counts_a_failure_and_goes_on() -> None:
    step = begin_map(2, concurrency=1, on_item_error=OnItemError.COLLECT)
    step = child_ended(step.progress, ok=False, first_time=True)
    assert step.start == range(1, 2) and not step.cancel_running
    step = child_ended(step.progress, ok=True, first_time=True)
    assert step.progress.finished and (step.progress.succeeded, step.progress.failed) == (1, 1)


def test_fail_ends_the_node_at_the_first_failure_and_cancels_the_running() -> None:
    step = begin_map(10, concurrency=3, on_item_error=OnItemError.FAIL)
    step = child_ended(step.progress, ok=False, first_time=True)
    assert step.cancel_running and step.progress.finished and step.start == range(0)
    assert step.progress.running == 0
    late = child_ended(step.progress, ok=True, first_time=True)
    assert late.progress == step.progress and not late.cancel_running


@pytest.mark.parametrize(
    ("total", "concurrency", "message"),
    [
        (MAX_MAP_ITEMS + 1, 1, f"0 to {MAX_MAP_ITEMS} items"),
        (-1, 1, "got -1"),
        (3, 0, f"concurrency is 1 to {MAX_MAP_CONCURRENCY}, got 0"),
        (3, MAX_MAP_CONCURRENCY + 1, "concurrency is 1 to"),
    ],
)
def test_a_map_out_of_bounds_is_a_deterministic_named_failure(
    total: int, concurrency: int, message: str
) -> None:
    with pytest.raises(InvalidMapError, match=message):
        begin_map(total, concurrency=concurrency, on_item_error=OnItemError.FAIL)
    assert issubclass(InvalidMapError, DeterministicNodeError)


@given(
    total=st.integers(0, 40),
    concurrency=st.integers(1, 8),
    mode=st.sampled_from(list(OnItemError)),
    data=st.data(),
)
def test_any_order_of_completions_with_duplicates_keeps_the_bounds(
    total: int, concurrency: int, mode: OnItemError, data: st.DataObject
) -> None:
    """Children end in any order, some completions twice: never more than ``concurrency``
    run, every item starts exactly once (until ``fail`` aborts), and the map finishes."""
    step = begin_map(total, concurrency=concurrency, on_item_error=mode)
    progress: MapProgress = step.progress
    running = list(step.start)
    started = list(step.start)
    ended: set[int] = set()
    for _ in range(total + 1):  # each turn ends one running child
        if progress.finished:
            break
        assert len(running) == progress.running <= concurrency
        if ended and data.draw(st.booleans()):  # a repeated completion first
            repeated = child_ended(progress, ok=True, first_time=False)
            assert repeated.progress == progress and repeated.start == range(0)
        index = data.draw(st.sampled_from(running))
        step = child_ended(progress, ok=data.draw(st.booleans()), first_time=True)
        ended.add(index)
        running.remove(index)
        running += list(step.start)
        started += list(step.start)
        progress = step.progress
    assert progress.finished
    assert started == list(range(len(started)))
    if not progress.aborted:
        assert started == list(range(total)) and progress.ended == total
