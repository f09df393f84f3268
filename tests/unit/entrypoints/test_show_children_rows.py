"""``plaita executions show`` for a person: a child names its parent, a parent what it waits
for — its child, its map's items, its branches (E12, E13, E14)."""

from __future__ import annotations

from typing import Any

from plaita.domain.children import OnItemError, begin_map, child_ended
from plaita.domain.execution import Suspension
from plaita.entrypoints.cli_executions import execution_rows


def view(**fields: Any) -> dict[str, Any]:
    return {
        "execution_id": "p-1",
        "flow_id": "f",
        "flow_version": "1",
        "tenant_id": "default",
        "status": "suspended",
        "created_at_ms": 0,
        "updated_at_ms": 0,
        **fields,
    }


def rows(**fields: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, text in execution_rows(view(**fields), now_ms=1_000):
        found.setdefault(name, []).append(text)
    return found


def test_a_child_names_its_parent_node_and_item() -> None:
    shown = rows(parent={"execution_id": "p-0", "node_id": "each", "index": 3})
    assert shown["parent"] == ["p-0 (node each, item 3)"]
    subflow = rows(parent={"execution_id": "p-0", "node_id": "kyc", "index": None})
    assert subflow["parent"] == ["p-0 (node kyc)"]


def test_a_parent_says_which_child_or_how_many_items_it_waits_for() -> None:
    child = Suspension("kyc", "timer-1", 60_000, child_id="p-1.kyc").to_json()
    assert rows(waiting_for=child)["waiting"] == ["at node kyc for its child execution p-1.kyc"]
    step = begin_map(10, concurrency=3, on_item_error=OnItemError.COLLECT)
    step = child_ended(step.progress, index=0, ok=False)
    mapped = Suspension("each", "timer-2", 60_000, map=step.progress).to_json()
    assert rows(waiting_for=mapped)["waiting"] == [
        "at node each for its children: 1 of 10 items ended (1 failed), 3 running"
    ]


def test_every_waiting_branch_is_shown() -> None:
    legal = Suspension("legal", "sub-1").to_json()
    finance = Suspension("finance", "sub-2").to_json()
    shown = rows(waiting_for=legal, branch_waits=[legal, finance])
    assert shown["waiting"] == ["at node legal for an event"]
    assert shown["branch waits"] == ["at node finance for an event"]
