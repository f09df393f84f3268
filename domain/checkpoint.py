"""Incremental checkpoints (S3): what one step changed, and the stored form of a checkpoint.

A checkpoint is stored in three parts:

- the **header**: every field of ``ExecutionState.to_json()`` except the two maps that grow
  with the run, each field JSON-encoded on its own (``input`` is one of them; it is written
  when the execution is created and never changes after);
- the **nodes**: one entry per node id, holding the node's latest result and timing as
  ``{"r": result, "t": [started_at_ms, ended_at_ms]}`` (either key absent when there is none:
  a wait that has not resumed has a start and no result);
- the **variables**: one entry per variable name.

A step writes only the header fields it changed, the node results it added or changed and the
variables it set or removed, so the bytes a step writes do not grow with the number of steps
before it (S3, P3). Everything here is pure: the adapters turn a ``CheckpointDelta`` into
their own writes (one fenced Lua script on Redis, dictionary updates in the memory twin).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from plaita.domain.execution import JSON, ExecutionState, NodeTiming
from plaita.domain.retention import Lifetime, lifetime_change

#: The parts of the state stored one entry per key rather than in the header.
NODE_RESULTS = "node_results"
NODE_TIMINGS = "node_timings"
VARIABLES = "variables"
GROWING_PARTS = frozenset({NODE_RESULTS, NODE_TIMINGS, VARIABLES})

#: The keys of a stored node entry: its result and its timing.
_RESULT, _TIMING = "r", "t"

_MISSING: Any = object()


@attrs.frozen
class CheckpointDelta:
    """What changed between two states of one execution, in checkpoint (JSON) form.

    ``full`` means there was no previous state to compare with: the delta holds the whole
    state, and a store replaces every part (stale node results or variables it still holds are
    dropped). Otherwise ``header`` holds only the header fields that changed.
    """

    execution_id: str
    full: bool
    header: Mapping[str, JSON]
    #: Node id → stored entry (``{"r": result, "t": timing}``) for the nodes that changed.
    nodes: Mapping[str, JSON] = attrs.field(factory=dict)
    removed_nodes: tuple[str, ...] = ()
    variables: Mapping[str, JSON] = attrs.field(factory=dict)
    removed_variables: tuple[str, ...] = ()
    #: What the save does to the lifetime of the execution's records (S5).
    lifetime: Lifetime = Lifetime.KEEP

    @property
    def is_empty(self) -> bool:
        """Nothing to write beyond the fence check (an incremental save of an unchanged state)."""
        return not (
            self.full
            or self.header
            or self.nodes
            or self.removed_nodes
            or self.variables
            or self.removed_variables
        )

    def apply_to(self, previous: ExecutionState | None) -> ExecutionState:
        """The state this delta describes, rebuilt on top of ``previous``.

        An incremental delta needs the state it was computed from (same execution);
        ``ValueError`` otherwise. A full delta ignores ``previous``.
        """
        if self.full:
            header: dict[str, JSON] = {}
            nodes: dict[str, JSON] = {}
            variables: dict[str, JSON] = {}
        elif previous is None or previous.execution_id != self.execution_id:
            raise ValueError(
                f"an incremental checkpoint of execution {self.execution_id!r} can only be "
                "applied to the state it was computed from"
            )
        else:
            header = header_of(previous)
            nodes = node_entries(previous)
            variables = dict(previous.variables)
        header.update(self.header)
        _update(nodes, self.nodes, self.removed_nodes)
        _update(variables, self.variables, self.removed_variables)
        results, timings = _split_entries(nodes)
        return ExecutionState.from_json(
            {**header, NODE_RESULTS: results, NODE_TIMINGS: timings, VARIABLES: variables}
        )


def _update(target: dict[str, JSON], changed: Mapping[str, JSON], removed: tuple[str, ...]) -> None:
    target.update(changed)
    for key in removed:
        target.pop(key, None)


def node_entries(state: ExecutionState) -> dict[str, JSON]:
    """The stored node entries of ``state``: each node's result and timing together, so a
    step rewrites one entry for the node it ran, never the others (S3)."""
    return _entries(state.node_results, state.node_timings)


def _entries(results: Mapping[str, JSON], timings: Mapping[str, NodeTiming]) -> dict[str, JSON]:
    entries: dict[str, dict[str, JSON]] = {}
    for node, result in results.items():
        entries[node] = {_RESULT: result}
    for node, timing in timings.items():
        entries.setdefault(node, {})[_TIMING] = timing.to_json()
    return dict(entries)


def _split_entries(entries: Mapping[str, JSON]) -> tuple[dict[str, JSON], dict[str, JSON]]:
    """Node results and timings (JSON form) from stored entries.

    An entry that is not ``{"r"?, "t"?}`` is a bare result, as checkpoints written before
    node timings stored them.
    """
    results: dict[str, JSON] = {}
    timings: dict[str, JSON] = {}
    for node, entry in entries.items():
        if isinstance(entry, dict) and entry and set(entry) <= {_RESULT, _TIMING}:
            if _RESULT in entry:
                results[node] = entry[_RESULT]
            if _TIMING in entry:
                timings[node] = entry[_TIMING]
        else:
            results[node] = entry
    return results, timings


def header_of(state: ExecutionState) -> dict[str, JSON]:
    """Every field of the checkpoint except the node entries and the variables."""
    return state.header_json()


def same_json(left: object, right: object) -> bool:
    """Equal *and* of the same JSON shape: ``1``, ``1.0`` and ``True`` are three values here.

    Python's ``==`` says ``1 == True``; trusting it would skip writing a result that changed
    from ``1`` to ``true`` and the stored checkpoint would be wrong.
    """
    if left is right:
        return True
    if type(left) is not type(right):
        return False
    if isinstance(left, Mapping):
        other: Mapping[Any, Any] = right  # type: ignore[assignment]
        return len(left) == len(other) and all(
            key in other and same_json(value, other[key]) for key, value in left.items()
        )
    if isinstance(left, list | tuple):
        items: list[Any] | tuple[Any, ...] = right  # type: ignore[assignment]
        return len(left) == len(items) and all(map(same_json, left, items))
    return bool(left == right)


def _map_delta(
    before: Mapping[str, JSON], after: Mapping[str, JSON]
) -> tuple[dict[str, JSON], tuple[str, ...]]:
    if before is after:
        return {}, ()
    changed = {
        key: value
        for key, value in after.items()
        if not same_json(before.get(key, _MISSING), value)
    }
    removed = tuple(sorted(key for key in before if key not in after))
    return changed, removed


def _node_delta(
    previous: ExecutionState, current: ExecutionState
) -> tuple[dict[str, JSON], tuple[str, ...]]:
    """The node entries ``current`` changed since ``previous``, and the ones it dropped.

    Only the changed entries are built: a step touches one node, so the cost of a save does
    not grow with the nodes run before it (P3). Results are compared as JSON (``same_json``),
    timings as values; an untouched result or timing is the very same object.
    """
    results, timings = current.node_results, current.node_timings
    before_results, before_timings = previous.node_results, previous.node_timings
    if results is before_results and timings is before_timings:
        return {}, ()
    changed = [
        node
        for node in {**results, **timings}
        if _differs(before_results, results, node, same_json)
        or _differs(before_timings, timings, node, _equal)
    ]
    entries = _entries(
        {node: results[node] for node in changed if node in results},
        {node: timings[node] for node in changed if node in timings},
    )
    removed = tuple(
        sorted(
            node
            for node in {**before_results, **before_timings}
            if node not in results and node not in timings
        )
    )
    return entries, removed


def _differs(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    node: str,
    same: Callable[[object, object], bool],
) -> bool:
    old, new = before.get(node, _MISSING), after.get(node, _MISSING)
    return old is not new and (old is _MISSING or new is _MISSING or not same(old, new))


def _equal(left: object, right: object) -> bool:
    return left == right


def checkpoint_delta(previous: ExecutionState | None, current: ExecutionState) -> CheckpointDelta:
    """What a save of ``current`` must write when the store holds ``previous``.

    ``previous`` None (or a state of another execution) gives a full delta: everything.
    """
    header = header_of(current)
    if previous is None or previous.execution_id != current.execution_id:
        return CheckpointDelta(
            execution_id=current.execution_id,
            full=True,
            header=header,
            nodes=node_entries(current),
            variables=dict(current.variables),
            lifetime=lifetime_change(None, current.status),
        )
    before = header_of(previous)
    changed_header = {
        name: value
        for name, value in header.items()
        # A step evolves the state: an attribute it did not touch is the very same object.
        if getattr(previous, name) is not getattr(current, name)
        and not same_json(before.get(name, _MISSING), value)
    }
    nodes, removed_nodes = _node_delta(previous, current)
    variables, removed_variables = _map_delta(previous.variables, current.variables)
    return CheckpointDelta(
        execution_id=current.execution_id,
        full=False,
        header=changed_header,
        nodes=nodes,
        removed_nodes=removed_nodes,
        variables=variables,
        removed_variables=removed_variables,
        lifetime=lifetime_change(previous.status, current.status),
    )


# --- the stored form: one JSON text per header field, node result and variable ------------


def encode_value(value: JSON) -> str:
    """The stored text of one header field, node result or variable."""
    return json.dumps(value, separators=(",", ":"))


def state_from_parts(
    header: Mapping[str, str], node_results: Mapping[str, str], variables: Mapping[str, str]
) -> ExecutionState:
    """Assemble a state from its stored texts (the inverse of writing a full delta)."""
    raw: dict[str, JSON] = {name: json.loads(text) for name, text in header.items()}
    entries = {node: json.loads(text) for node, text in node_results.items()}
    raw[NODE_RESULTS], raw[NODE_TIMINGS] = _split_entries(entries)
    raw[VARIABLES] = {name: json.loads(text) for name, text in variables.items()}
    return ExecutionState.from_json(raw)
