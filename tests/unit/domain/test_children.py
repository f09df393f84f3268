"""Child executions (E13, E14): ids derived from the parent, and a map's progress — bounded
concurrency, repeated completions without effect, ``fail`` and ``collect``."""

from __future__ import annotations

import attrs
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
    repeats_end_notice,
)
from plaita.domain.execution import ExecutionState, ExecutionStatus, ParentLink
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
    step = child_ended(step.progress, index=1, ok=True)
    assert step.start == range(2, 3) and step.progress.running == 2
    for index in (0, 2, 3, 4):
        step = child_ended(step.progress, index=index, ok=True)
    assert step.progress.finished and step.progress.succeeded == 5
    assert step.progress.started == 5 and step.start == range(0)


def test_an_empty_list_is_finished_at_once() -> None:
    step = begin_map(0, concurrency=10, on_item_error=OnItemError.COLLECT)
    assert step.start == range(0) and step.progress.finished


def test_a_repeated_completion_changes_nothing() -> None:
    step = begin_map(3, concurrency=1, on_item_error=OnItemError.COLLECT)
    once = child_ended(step.progress, index=0, ok=True)
    again = child_ended(once.progress, index=0, ok=True)
    assert again.progress == once.progress and again.start == range(0) and not again.counted


def test_a_completion_for_an_item_not_started_changes_nothing() -> None:
    step = begin_map(3, concurrency=1, on_item_error=OnItemError.COLLECT)
    for index in (1, 2, -1, 7):
        early = child_ended(step.progress, index=index, ok=True)
        assert early.progress == step.progress and not early.counted


def test_the_window_slides_past_ended_items_and_stays_small() -> None:
    """Out-of-order ends are bits above ``low``; once the oldest ends, ``low`` moves past
    every ended index at once and the bits are gone."""
    step = begin_map(1000, concurrency=3, on_item_error=OnItemError.FAIL)
    step = child_ended(step.progress, index=2, ok=True)
    step = child_ended(step.progress, index=1, ok=True)
    assert (step.progress.low, step.progress.done) == (0, 0b110)
    assert step.progress.running_indexes() == [0, 3, 4]
    step = child_ended(step.progress, index=0, ok=True)
    assert (step.progress.low, step.progress.done) == (3, 0)
    for index in range(3, 1000):
        step = child_ended(step.progress, index=index, ok=True)
    assert step.progress.finished and step.progress.low == 1000
    assert len(str(step.progress.to_json())) < 250  # 1,000 items: a few counters


def test_the_progress_survives_its_json_form() -> None:
    step = begin_map(70, concurrency=5, on_item_error=OnItemError.COLLECT)
    for index in (4, 1, 3):
        step = child_ended(step.progress, index=index, ok=index != 3)
    assert MapProgress.from_json(step.progress.to_json()) == step.progress


def test_collect_counts_a_failure_and_goes_on() -> None:
    step = begin_map(2, concurrency=1, on_item_error=OnItemError.COLLECT)
    step = child_ended(step.progress, index=0, ok=False)
    assert step.start == range(1, 2) and not step.cancel_running
    step = child_ended(step.progress, index=1, ok=True)
    assert step.progress.finished and (step.progress.succeeded, step.progress.failed) == (1, 1)


def test_fail_ends_the_node_at_the_first_failure_and_cancels_the_running() -> None:
    step = begin_map(10, concurrency=3, on_item_error=OnItemError.FAIL)
    step = child_ended(step.progress, index=1, ok=False)
    assert step.cancel_running and step.progress.finished and step.start == range(0)
    assert step.progress.running == 0 and step.progress.failed_index == 1
    assert step.progress.running_indexes() == [0, 2]  # what to cancel
    late = child_ended(step.progress, index=0, ok=True)
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
    run, every item starts exactly once (until ``fail`` aborts), each counts once, and the
    map finishes."""
    step = begin_map(total, concurrency=concurrency, on_item_error=mode)
    progress: MapProgress = step.progress
    running = list(step.start)
    started = list(step.start)
    ended: list[int] = []
    for _ in range(total + 1):  # each turn ends one running child
        if progress.finished:
            break
        assert len(running) == progress.running <= concurrency
        assert progress.running_indexes() == sorted(running)
        if ended and data.draw(st.booleans()):  # a repeated completion first
            repeated = child_ended(progress, index=data.draw(st.sampled_from(ended)), ok=True)
            assert repeated.progress == progress and not repeated.counted
        index = data.draw(st.sampled_from(running))
        step = child_ended(progress, index=index, ok=data.draw(st.booleans()))
        assert step.counted
        ended.append(index)
        running.remove(index)
        running += list(step.start)
        started += list(step.start)
        progress = MapProgress.from_json(step.progress.to_json())
    assert progress.finished
    assert started == list(range(len(started)))
    assert all(progress.has_ended(i) for i in ended)
    if not progress.aborted:
        assert started == list(range(total)) and progress.ended == total


def _child(status: ExecutionStatus, parent: ParentLink | None) -> ExecutionState:
    state = ExecutionState.new(
        execution_id="p.each.0",
        flow_id="item",
        flow_version="1",
        fingerprint="f",
        start_node_id="work",
        input={},
        now_ms=0,
    )
    state = attrs.evolve(state, parent=parent)
    return state if status is ExecutionStatus.RUNNING else state.transition(status, now_ms=1)


LINK = ParentLink("p", "parent", "each", 0)


@pytest.mark.parametrize(
    ("status", "parent", "reclaimed", "repeats"),
    [
        (ExecutionStatus.COMPLETED, LINK, True, True),  # the dead worker's notice is redone
        (ExecutionStatus.ERROR, LINK, True, True),
        (ExecutionStatus.CANCELLED, LINK, True, True),
        (ExecutionStatus.COMPLETED, LINK, False, False),  # a plain duplicate: it was sent
        (ExecutionStatus.RUNNING, LINK, True, False),  # not ended: its end will tell
        (ExecutionStatus.COMPLETED, None, True, False),  # no parent to tell
    ],
)
def test_a_reclaimed_carrier_repeats_an_ended_childs_notice(
    status: ExecutionStatus, parent: ParentLink | None, reclaimed: bool, repeats: bool
) -> None:
    """E14: a notice lost with a killed worker is sent again within the claim idle."""
    assert repeats_end_notice(_child(status, parent), reclaimed=reclaimed) is repeats
    assert repeats_end_notice(None, reclaimed=True) is False
