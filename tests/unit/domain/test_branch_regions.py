"""The structural rules of a fork (E12): every branch reaches the join and only the join,
no branch crosses another, no node belongs to two branches — each a named error."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.branch_regions import branch_regions
from plaita.domain.errors import (
    BranchDoesNotReachJoinError,
    BranchesCrossError,
    BranchLeavesWithoutJoinError,
    FlowDefinitionError,
    InvalidForkError,
    NodeInTwoBranchesError,
)

#: fan forks into a (a1 → a2) and b (an if: b → b_yes | b_no), both joining at merge.
GRAPH: dict[str, list[str]] = {
    "fan": ["a", "b"],
    "a": ["a2"],
    "a2": ["merge"],
    "b": ["b_yes", "b_no"],
    "b_yes": ["merge"],
    "b_no": ["b"],  # a loop inside a branch is fine: it can still reach the join
    "merge": ["done"],
    "done": [],
}


def regions(graph: dict[str, list[str]], branches: list[str], join: str = "merge"):
    return branch_regions(graph, fork="fan", branches=branches, join=join)


def test_each_branch_owns_the_nodes_from_its_start_to_the_join() -> None:
    assert regions(GRAPH, ["a", "b"]) == {
        "a": frozenset({"a", "a2"}),
        "b": frozenset({"b", "b_yes", "b_no"}),
    }


def test_a_branch_that_is_the_join_at_once_is_an_empty_path_refused() -> None:
    with pytest.raises(InvalidForkError, match="branch 'merge' cannot be the join"):
        regions(GRAPH, ["a", "merge"])


def test_a_nested_fork_inside_a_branch_stays_in_that_branch() -> None:
    graph = GRAPH | {
        "a": ["inner"],
        "inner": ["x", "y"],
        "x": ["inner_join"],
        "y": ["inner_join"],
        "inner_join": ["a2"],
    }
    assert regions(graph, ["a", "b"])["a"] == frozenset(
        {"a", "inner", "x", "y", "inner_join", "a2"}
    )


@pytest.mark.parametrize(
    ("graph", "branches", "error", "message"),
    [
        (GRAPH, ["a"], InvalidForkError, "at least two branches"),
        (GRAPH, ["a", "a"], InvalidForkError, "a branch is named twice"),
        (GRAPH, ["a", "ghost"], InvalidForkError, "node 'ghost' does not exist"),
        (GRAPH, ["a", "fan"], InvalidForkError, "branch 'fan' cannot be the join or the fork"),
        (
            GRAPH | {"a2": ["done"]},
            ["a", "b"],
            BranchLeavesWithoutJoinError,
            "branch 'a' can end at 'done' without reaching join 'merge'",
        ),
        (
            GRAPH | {"a2": ["fan"]},
            ["a", "b"],
            BranchLeavesWithoutJoinError,
            "branch 'a' leads back to the fork",
        ),
        (
            GRAPH | {"a2": ["a"]},
            ["a", "b"],
            BranchDoesNotReachJoinError,
            "branch 'a' never reaches join 'merge'",
        ),
        (
            GRAPH | {"a2": ["b"]},
            ["a", "b"],
            BranchesCrossError,
            "branch 'a' runs into the start of branch 'b'",
        ),
        (
            GRAPH | {"a2": ["b_yes"]},
            ["a", "b"],
            NodeInTwoBranchesError,
            "node 'b_yes' is in branch 'a' and in branch 'b'",
        ),
    ],
)
def test_a_fork_that_breaks_a_rule_is_a_named_definition_error(
    graph: dict[str, list[str]], branches: list[str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        regions(graph, branches)
    assert issubclass(error, FlowDefinitionError)


def test_the_join_must_exist() -> None:
    with pytest.raises(InvalidForkError, match="node 'nowhere' does not exist"):
        regions(GRAPH, ["a", "b"], join="nowhere")


@st.composite
def forks(draw: st.DrawFn) -> tuple[dict[str, list[str]], list[str]]:
    """A random graph over n0…n7 plus fan, merge and done, with two or three branches."""
    names = [f"n{i}" for i in range(8)]
    pool = [*names, "merge", "done", "fan"]
    graph: dict[str, list[str]] = {
        name: draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2)) for name in names
    }
    branches = draw(st.lists(st.sampled_from(names), min_size=2, max_size=3, unique=True))
    graph |= {"fan": list(branches), "merge": ["done"], "done": []}
    return graph, branches


@given(forks())
def test_accepted_regions_are_disjoint_and_closed_up_to_the_join(
    fork: tuple[dict[str, list[str]], list[str]],
) -> None:
    graph, branches = fork
    try:
        found = regions(graph, branches)
    except FlowDefinitionError:
        return
    owners = [node for region in found.values() for node in region]
    assert len(owners) == len(set(owners)), "a node in two regions"
    for start, region in found.items():
        assert start in region and "merge" not in region and "fan" not in region
        for node in region:
            assert graph[node], "a dead end inside a branch"
            assert set(graph[node]) <= region | {"merge"}, "a region leaks past the join"
