"""Incremental checkpoints: the delta between two states and the stored form (S3, P3)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.checkpoint import (
    GROWING_PARTS,
    CheckpointDelta,
    checkpoint_delta,
    encode_value,
    header_of,
    node_entries,
    same_json,
    state_from_parts,
)
from plaita.domain.execution import (
    ExecutionError,
    ExecutionState,
    ExecutionStatus,
    NodeTiming,
    Suspension,
)

NOW = 1_000


def new_state(**overrides: Any) -> ExecutionState:
    state = ExecutionState.new(
        execution_id="x-1",
        flow_id="approval",
        flow_version="1",
        fingerprint="ab" * 32,
        start_node_id="request",
        input={"amount": 120},
        now_ms=NOW,
    )
    return attrs.evolve(state, **overrides)


def stored_texts(delta: CheckpointDelta) -> tuple[dict[str, str], ...]:
    """What a store holds after writing ``delta`` in full: one JSON text per entry."""
    assert delta.full
    return (
        {name: encode_value(value) for name, value in delta.header.items()},
        {node: encode_value(value) for node, value in delta.nodes.items()},
        {name: encode_value(value) for name, value in delta.variables.items()},
    )


# --- what a delta holds -------------------------------------------------------------------


def test_without_previous_the_delta_is_the_whole_state() -> None:
    state = new_state(node_results={"a": 1}, variables={"v": [1]})

    delta = checkpoint_delta(None, state)

    assert delta.full
    assert delta.header == header_of(state)
    assert delta.header["input"] == {"amount": 120}
    assert delta.nodes == {"a": {"r": 1}}
    assert delta.variables == {"v": [1]}
    assert not delta.is_empty


def test_the_header_is_every_field_but_the_growing_maps() -> None:
    """A field added to ExecutionState lands in the header without touching this module."""
    state = new_state()

    assert set(header_of(state)) == set(state.to_json()) - GROWING_PARTS
    assert {"node_results", "node_timings", "variables"} == GROWING_PARTS


def test_one_step_writes_its_node_result_and_the_header_fields_it_moved() -> None:
    before = new_state(node_results={f"n{i}": {"i": i} for i in range(500)}, steps=500)
    after = before.transition(
        ExecutionStatus.RUNNING,
        now_ms=NOW + 1,
        node_results={**before.node_results, "n500": {"i": 500}},
        last_node_id="n500",
        next_node_id="n501",
        steps=501,
    )

    delta = checkpoint_delta(before, after)

    assert not delta.full
    assert delta.nodes == {"n500": {"r": {"i": 500}}}
    assert delta.header == {
        "updated_at_ms": NOW + 1,
        "last_node_id": "n500",
        "next_node_id": "n501",
        "steps": 501,
    }
    assert delta.variables == {} and delta.removed_nodes == ()


def test_variables_set_changed_and_removed() -> None:
    before = new_state(variables={"keep": 1, "change": "a", "drop": None, "gone": 0})
    after = attrs.evolve(before, variables={"keep": 1, "change": "b", "new": [1]})

    delta = checkpoint_delta(before, after)

    assert delta.variables == {"change": "b", "new": [1]}
    assert delta.removed_variables == ("drop", "gone")
    assert delta.header == {}


def test_a_node_result_removed_is_recorded() -> None:
    before = new_state(node_results={"a": 1, "b": 2})
    after = attrs.evolve(before, node_results={"a": 1})

    assert checkpoint_delta(before, after).removed_nodes == ("b",)


def test_an_unchanged_state_gives_an_empty_delta() -> None:
    state = new_state(node_results={"a": 1}, variables={"v": 1})

    delta = checkpoint_delta(state, state)

    assert delta.is_empty
    assert delta.apply_to(state) == state


def test_equal_maps_in_new_objects_give_an_empty_delta() -> None:
    before = new_state(node_results={"a": {"x": [1, 2]}}, variables={"v": 1})
    after = attrs.evolve(
        before, node_results={"a": {"x": [1, 2]}}, variables={"v": 1}, input={"amount": 120}
    )

    assert checkpoint_delta(before, after).is_empty


@pytest.mark.parametrize(
    ("old", "new"),
    [(1, True), (1, 1.0), (0, False), ([1], (1,)), ({"a": 1}, {"a": True}), ([1, 2], [1, 2, 3])],
)
def test_a_change_of_json_type_is_a_change(old: Any, new: Any) -> None:
    """Python says 1 == True and 1 == 1.0; the stored JSON does not."""
    before = new_state(node_results={"a": old}, result=old)
    after = attrs.evolve(before, node_results={"a": new}, result=new)

    delta = checkpoint_delta(before, after)

    assert delta.nodes == {"a": {"r": new}}
    assert delta.header == {"result": new}


def test_a_status_change_clears_the_suspension_in_the_header() -> None:
    suspended = new_state(
        status=ExecutionStatus.SUSPENDED, suspension=Suspension("wait", subscription_id="s")
    )
    resumed = suspended.transition(ExecutionStatus.RUNNING, now_ms=NOW + 5)

    delta = checkpoint_delta(suspended, resumed)

    assert delta.header == {"status": "running", "suspension": None, "updated_at_ms": NOW + 5}


def test_a_previous_state_of_another_execution_gives_a_full_delta() -> None:
    other = new_state(execution_id="x-2", node_results={"stale": 1})
    state = new_state(node_results={"a": 1})

    delta = checkpoint_delta(other, state)

    assert delta.full
    assert delta.apply_to(other) == state


def test_a_full_delta_applies_to_nothing() -> None:
    state = new_state(variables={"v": 1})

    assert checkpoint_delta(None, state).apply_to(None) == state


@pytest.mark.parametrize("previous", [None, new_state(execution_id="x-2")])
def test_an_incremental_delta_needs_the_state_it_came_from(
    previous: ExecutionState | None,
) -> None:
    before = new_state()
    delta = checkpoint_delta(before, attrs.evolve(before, steps=1))

    with pytest.raises(ValueError, match="x-1"):
        delta.apply_to(previous)


def test_removing_a_key_that_is_not_there_is_harmless() -> None:
    delta = CheckpointDelta(
        execution_id="x-1",
        full=False,
        header={},
        removed_nodes=("never",),
        removed_variables=("never",),
    )

    assert delta.apply_to(new_state()) == new_state()


# --- same_json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        (None, None, True),
        ("a", "a", True),
        (1, 1, True),
        (1, True, False),
        (1.5, 1.5, True),
        ({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}, True),
        ({"a": 1}, {"b": 1}, False),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ([1, 2], [2, 1], False),
        ((1, 2), (1, 2), True),
        ([1], (1,), False),
    ],
)
def test_same_json(left: Any, right: Any, same: bool) -> None:
    assert same_json(left, right) is same
    assert same_json(right, left) is same


# --- the stored form -------------------------------------------------------------------------


def test_the_stored_texts_are_compact_json() -> None:
    assert encode_value({"a": [1, None, "ü"]}) == '{"a":[1,null,"\\u00fc"]}'


def test_a_state_is_assembled_from_its_stored_texts() -> None:
    state = new_state(
        status=ExecutionStatus.ERROR,
        node_results={"a": {"ok": 1}},
        variables={"v": [1, 2.5]},
        error=ExecutionError(code=500, message="boom", node_id="a"),
    )

    assert state_from_parts(*stored_texts(checkpoint_delta(None, state))) == state


# --- properties ------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
few_keys = st.sampled_from(["a", "b", "c", "d", ""])
maps = st.dictionaries(few_keys, json_values, max_size=5)
timing_values = st.builds(
    NodeTiming,
    st.integers(min_value=0, max_value=2**53),
    st.none() | st.integers(min_value=0, max_value=2**53),
)
timings = st.dictionaries(few_keys, timing_values, max_size=3)
optional_keys = st.none() | few_keys
states = st.builds(
    ExecutionState,
    execution_id=st.just("x-1"),
    flow_id=st.just("approval"),
    flow_version=st.sampled_from(["1", "2"]),
    fingerprint=st.sampled_from(["", "ab" * 32]),
    status=st.sampled_from(ExecutionStatus),
    created_at_ms=st.integers(min_value=0, max_value=2**53),
    updated_at_ms=st.integers(min_value=0, max_value=2**53),
    tenant_id=st.sampled_from(["default", "acme"]),
    input=maps,
    variables=maps,
    node_results=maps,
    next_node_id=optional_keys,
    last_node_id=optional_keys,
    last_branch=optional_keys,
    suspension=st.none() | st.builds(Suspension, node_id=few_keys, subscription_id=optional_keys),
    result=json_values,
    error=st.none() | st.builds(ExecutionError, code=st.integers(0, 999), message=few_keys),
    steps=st.integers(min_value=0, max_value=10**6),
    subgraph_fingerprint=st.none() | st.sampled_from(["cd" * 32]),
    node_timings=timings,
)


@st.composite
def state_pairs(draw: st.DrawFn) -> tuple[ExecutionState, ExecutionState]:
    """Two states of one execution: a step's worth of changes, or two unrelated checkpoints."""
    previous = draw(states)
    if draw(st.booleans()):
        return previous, draw(states)
    names = draw(st.sets(st.sampled_from(sorted(CHANGEABLE))))
    changes = {name: draw(CHANGEABLE[name]) for name in names}
    for part in ("node_results", "variables", "node_timings"):
        kept = draw(st.sets(st.sampled_from(sorted(getattr(previous, part)) or [""])))
        grown = {k: v for k, v in getattr(previous, part).items() if k in kept}
        changes[part] = {**grown, **draw(timings if part == "node_timings" else maps)}
    return previous, attrs.evolve(previous, **changes)


CHANGEABLE: dict[str, st.SearchStrategy[Any]] = {
    "status": st.sampled_from(ExecutionStatus),
    "updated_at_ms": st.integers(min_value=0, max_value=2**53),
    "next_node_id": optional_keys,
    "last_node_id": optional_keys,
    "suspension": st.none() | st.builds(Suspension, node_id=few_keys),
    "result": json_values,
    "steps": st.integers(min_value=0, max_value=10**6),
}


@given(state_pairs())
def test_applying_the_delta_to_previous_yields_current(
    pair: tuple[ExecutionState, ExecutionState],
) -> None:
    """The property S3 rests on; and the delta holds nothing that did not change."""
    previous, current = pair
    delta = checkpoint_delta(previous, current)

    assert delta.apply_to(previous) == current
    assert not delta.full
    before = header_of(previous)
    assert all(not same_json(before[name], value) for name, value in delta.header.items())
    before_nodes, after_nodes = node_entries(previous), node_entries(current)
    assert all(
        node not in before_nodes or not same_json(before_nodes[node], entry)
        for node, entry in delta.nodes.items()
    )
    assert set(delta.removed_nodes) == set(before_nodes) - set(after_nodes)
    assert set(delta.removed_variables) == set(previous.variables) - set(current.variables)


@given(states)
def test_a_full_delta_stored_and_read_back_is_the_state(current: ExecutionState) -> None:
    delta = checkpoint_delta(None, current)

    assert state_from_parts(*stored_texts(delta)) == current
    assert delta.apply_to(None) == current


def test_a_node_entry_holds_its_result_and_its_timing() -> None:
    """C2: a step rewrites one entry for the node it ran: result and timing together."""
    before = new_state(node_results={"a": 1}, node_timings={"a": NodeTiming(5, 9)})
    after = attrs.evolve(
        before,
        node_results={"a": 1, "b": {"x": 2}},
        node_timings={"a": NodeTiming(5, 9), "b": NodeTiming(10, 12), "w": NodeTiming(13)},
    )

    delta = checkpoint_delta(before, after)

    assert delta.nodes == {"b": {"r": {"x": 2}, "t": [10, 12]}, "w": {"t": [13, None]}}
    assert delta.apply_to(before) == after


def test_a_bare_stored_result_is_read_as_a_result() -> None:
    """Checkpoints written before node timings stored each node's result bare."""
    state = new_state(node_results={"a": {"ok": 1}})
    header, _, variables = stored_texts(checkpoint_delta(None, state))

    assert state_from_parts(header, {"a": '{"ok":1}'}, variables) == state
