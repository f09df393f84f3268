"""Parallel, subflow and map nodes across real ``plaita worker`` processes on a real Redis
(E12, E13, E14): a map of 200 items over two workers, one killed with ``kill -9`` mid-run; a
subflow whose child an operator cancels; a parent deleted while its children wait; two
branches that each wait for their own event, resumed in either order and with duplicates.

The flows are in ``fanout_flows/``; each item's task is ``fault_handlers:step``, which
leaves the evidence of every run in Redis. Timings are the fault suites' (lease TTL 3 s,
reclaim after 1.5 s idle); every wait is a bounded poll and the fixture stops every process.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from typing import Any

import pytest

from .conftest import (
    HANDLER_MODULE,
    Plaita,
    PlannedEvent,
    poll,
    requires_redis,
    share_fault_timings,
)
from .test_faults import runs

pytestmark = [requires_redis, pytest.mark.process]

FLOWS = "tests/integration/fanout_flows"


@pytest.fixture(autouse=True)
def fault_pool(plaita: Plaita) -> None:
    share_fault_timings(plaita)


def start_worker(plaita: Plaita, name: str) -> Any:
    consumer = f"{name}-{uuid.uuid4().hex[:8]}"
    process = plaita.spawn(
        name,
        "worker",
        "--flows",
        FLOWS,
        "--handler-modules",
        HANDLER_MODULE,
        "--concurrency",
        "4",
        "--consumer-name",
        consumer,
        "--read-block-ms",
        "100",
    )
    poll(
        lambda: "worker.started" in plaita.log_of(process) or process.poll() is not None,
        timeout=20,
        interval=0.1,
        what=f"worker {name} to start",
    )
    assert process.poll() is None, f"worker {name} exited\n{plaita.logs()}"
    return process


def start(plaita: Plaita, flow_id: str, given: dict[str, Any]) -> str:
    started = plaita.json("executions", "start", flow_id, "--input", json.dumps(given))
    return str(started["execution_id"])


def child_ids(parent: str, count: int) -> list[str]:
    return [f"{parent}.each.{index}" for index in range(count)]


def test_a_map_of_200_items_over_two_workers_survives_a_kill_9(plaita: Plaita) -> None:
    first, second = start_worker(plaita, "first"), start_worker(plaita, "second")
    parent = start(plaita, "fan_map", {"items": list(range(200))})
    children = child_ids(parent, 200)

    def some_ended() -> bool:
        views = plaita.states(children[:60])
        return sum(1 for v in views.values() if v and v["status"] == "completed") >= 30

    poll(some_ended, timeout=60, interval=0.1, what="30 items to end")
    os.kill(first.pid, signal.SIGKILL)  # mid-run: its children and perhaps the parent's step
    first.wait(timeout=10)
    (view,) = plaita.wait_for_statuses(
        [parent], {"completed", "error"}, 120, alive=[second]
    ).values()
    assert view["status"] == "completed", view
    assert view["result"] == [n * 10 for n in range(200)]  # each item once, in item order
    ended = plaita.states(children)
    assert all(v is not None and v["status"] == "completed" for v in ended.values())
    assert all(runs(plaita, child, "work") >= 1 for child in children)
    # No item was started twice under another id, nor past the list.
    assert plaita.states([f"{parent}.each.200"]) == {f"{parent}.each.200": None}


def test_a_subflow_whose_child_an_operator_cancels_fails_through_its_node(
    plaita: Plaita,
) -> None:
    worker = start_worker(plaita, "worker")
    parent = start(plaita, "fan_subflow", {})
    child = f"{parent}.child"
    plaita.wait_for_statuses([child, parent], {"suspended"}, 30, alive=[worker])
    plaita.run("executions", "cancel", child)
    views = plaita.wait_for_statuses([parent], {"error", "completed"}, 30, alive=[worker])
    error = views[parent]["error"]
    assert views[parent]["status"] == "error" and error["node_id"] == "child"
    assert f"child execution {child} cancelled" in error["message"]


def test_a_parent_deleted_while_its_children_wait_cancels_them(plaita: Plaita) -> None:
    worker = start_worker(plaita, "worker")
    parent = start(plaita, "fan_map_hold", {"items": list(range(10))})
    running = child_ids(parent, 4)  # concurrency 4: the rest never start
    plaita.wait_for_statuses([*running, parent], {"suspended"}, 30, alive=[worker])
    plaita.run("executions", "delete", parent)
    views = plaita.wait_for_statuses(running, {"cancelled"}, 30, alive=[worker])
    assert {v["status"] for v in views.values()} == {"cancelled"}
    assert plaita.states([parent, f"{parent}.each.4"]) == {parent: None, f"{parent}.each.4": None}


@pytest.mark.parametrize("first", ["legal", "finance"])
def test_two_branches_wait_for_their_own_events_in_either_order_with_duplicates(
    plaita: Plaita, first: str
) -> None:
    one, two = start_worker(plaita, "one"), start_worker(plaita, "two")
    router = plaita.spawn("event-filter", "event-filter", "--read-block-ms", "100")
    parents = plaita.start_executions("fan_parallel", 3)
    plaita.wait_for_statuses(parents, {"suspended"}, 30, alive=[one, two, router])
    then = "finance" if first == "legal" else "legal"
    values = {"legal": 7, "finance": 9}
    events = [
        PlannedEvent(f"{branch}.ok", parent, {"v": values[branch]})
        for branch in (first, first, then, then)  # each event twice
        for parent in parents
    ]
    plaita.publish(events)
    views = plaita.wait_for_statuses(parents, {"completed", "error"}, 60, alive=[one, two, router])
    for parent in parents:
        assert views[parent]["status"] == "completed", views[parent]
        assert views[parent]["result"] == [7, 9]
        assert runs(plaita, parent, "both") == 1, "the join ran once"
        assert runs(plaita, parent, "legal_step") == 1, "a duplicate event ran nothing again"
