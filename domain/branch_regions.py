"""Which nodes belong to which branch of a fork, and the structural rules a fork obeys (E12).

A fork starts branches at nodes ``b1 … bn`` that run until they reach its ``join``. A
branch's *region* is every node reachable from its start without passing through the join.
The rules, each a named error naming the fork, the branch and the node:

- the branches are distinct nodes of the flow, at least two, none of them the join or the
  fork itself (``InvalidForkError``);
- every branch reaches the join (``BranchDoesNotReachJoinError``), and no path of a branch
  ends before it: a branch holds no node without a successor, such as an ``end``
  (``BranchLeavesWithoutJoinError``) and never leads back to its own fork;
- a branch never runs into another branch's start (``BranchesCrossError``) and no node is in
  two regions (``NodeInTwoBranchesError``): after the fork each node has one owner, so a
  token's position always says which branch it is.

Pure: the graph is given as node id → its targets, so the rule is tested on tables and the
flow model only supplies its graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from plaita.domain.errors import (
    BranchDoesNotReachJoinError,
    BranchesCrossError,
    BranchLeavesWithoutJoinError,
    InvalidForkError,
    NodeInTwoBranchesError,
)

Graph = Mapping[str, Sequence[str]]


def branch_regions(
    graph: Graph, *, fork: str, branches: Sequence[str], join: str
) -> dict[str, frozenset[str]]:
    """Each branch start → the nodes of its region (the start included, the join not)."""
    where = f"parallel node {fork!r}"
    _check_shape(graph, where, fork, branches, join)
    regions: dict[str, frozenset[str]] = {}
    owner: dict[str, str] = {}
    for start in branches:
        region, reaches_join = _region(graph, start, join)
        if fork in region:
            raise BranchLeavesWithoutJoinError(
                f"{where}: branch {start!r} leads back to the fork before it reaches join "
                f"{join!r}; a branch runs from its start to the join"
            )
        dead_ends = sorted(node for node in region if not graph[node])
        if dead_ends:
            raise BranchLeavesWithoutJoinError(
                f"{where}: branch {start!r} can end at {dead_ends[0]!r} without reaching join "
                f"{join!r}; every path of a branch must lead to the join"
            )
        if not reaches_join:
            raise BranchDoesNotReachJoinError(
                f"{where}: branch {start!r} never reaches join {join!r}"
            )
        crossed = sorted(other for other in branches if other != start and other in region)
        if crossed:
            raise BranchesCrossError(
                f"{where}: branch {start!r} runs into the start of branch {crossed[0]!r}; "
                "branches must not cross before the join"
            )
        for node in sorted(region):
            if node in owner:
                raise NodeInTwoBranchesError(
                    f"{where}: node {node!r} is in branch {owner[node]!r} and in branch "
                    f"{start!r}; a node belongs to at most one branch (join the branches "
                    "first, or give each its own copy of the node)"
                )
            owner[node] = start
        regions[start] = region
    return regions


def _check_shape(graph: Graph, where: str, fork: str, branches: Sequence[str], join: str) -> None:
    if len(branches) < 2:
        raise InvalidForkError(f"{where}: give at least two branches, got {list(branches)!r}")
    if len(set(branches)) != len(branches):
        raise InvalidForkError(f"{where}: a branch is named twice in {list(branches)!r}")
    for node in (*branches, join):
        if node not in graph:
            raise InvalidForkError(f"{where}: node {node!r} does not exist")
    for start in branches:
        if start in (join, fork):
            raise InvalidForkError(
                f"{where}: branch {start!r} cannot be the join or the fork itself"
            )


def _region(graph: Graph, start: str, join: str) -> tuple[frozenset[str], bool]:
    """The nodes reachable from ``start`` without passing through ``join``, and whether the
    join was reached at all."""
    seen: set[str] = set()
    stack = [start]
    reaches_join = False
    while stack:
        node = stack.pop()
        if node == join:
            reaches_join = True
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.extend(graph[node])
    return frozenset(seen), reaches_join
