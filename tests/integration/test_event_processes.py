"""Events and timers across real processes on a real Redis (V4, V5, V8).

- A notification lost with its event filter is recovered by another filter's reconciler,
  not by reclaiming it (V5).
- Sleep timers and event timeouts live in the delay queue, not in a worker: they fire after
  the worker that scheduled them was killed (V8).
- An event that races its own timeout resumes the wait at most once: exactly one of the
  event and timeout branches runs (V6, V8).

Flows: ``examples/flows/approval.json`` and ``flows/timer_*.json``; the timer flows' task
nodes run ``tests.integration.fault_handlers:step``, which counts each run in Redis. Every
wait is a bounded poll; every process is stopped by the fixture (or killed here by pid).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from typing import Any

import pytest

from . import fault_handlers
from .conftest import (
    HANDLER_MODULE,
    TERMINAL,
    Plaita,
    PlannedEvent,
    poll,
    requires_redis,
    share_fault_timings,
    worker_args,
)

pytestmark = [requires_redis, pytest.mark.process]

EVENT_FILTER_GROUP = "plaita-event-filter"
TIMER_FLOWS = (
    "tests/integration/flows/timer_sleep.json",
    "tests/integration/flows/timer_event.json",
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def runs(plaita: Plaita, execution_id: str, node: str) -> int:
    value = plaita.redis().get(fault_handlers.runs_key(plaita.namespace, execution_id, node))
    return int(value or 0)


def pids(plaita: Plaita, execution_id: str, node: str) -> list[int]:
    key = fault_handlers.pids_key(plaita.namespace, execution_id, node)
    return [int(pid) for pid in plaita.redis().lrange(key, 0, -1)]


def start(plaita: Plaita, flow_id: str, params: str = "{}") -> str:
    started = plaita.json("executions", "start", flow_id, "--input", params)
    return str(started["execution_id"])


def suspended(plaita: Plaita, execution_ids: list[str], *alive: subprocess.Popen[bytes]) -> Any:
    return plaita.wait_for_statuses(execution_ids, {"suspended"}, timeout=20, alive=alive)


def event_filter(
    plaita: Plaita, *args: str, client_name: str | None = None
) -> subprocess.Popen[bytes]:
    env = None
    if client_name is not None:
        # Names this process's Redis connections, so CLIENT LIST tells which one is blocked.
        env = {"PLAITA_REDIS_URL": f"{plaita.redis_url}?client_name={client_name}"}
    return plaita.spawn("event-filter", "event-filter", "--read-block-ms", "100", *args, env=env)


def pending_on(plaita: Plaita, consumer: str) -> int:
    """Notifications delivered to ``consumer`` and never acked."""
    stream = plaita.key("events:stream")
    summary = plaita.redis().xpending(stream, EVENT_FILTER_GROUP)
    return sum(int(entry["pending"]) for entry in summary["consumers"] if entry["name"] == consumer)


def blocked_reading(plaita: Plaita, client_name: str) -> bool:
    return any(
        client.get("name") == client_name
        and client.get("cmd") == "xreadgroup"
        and "b" in client.get("flags", "")
        for client in plaita.redis().client_list()
    )


# --- V5: the reconciler recovers a lost notification --------------------------------------


def test_the_reconciler_recovers_an_event_whose_notification_was_lost(plaita: Plaita) -> None:
    worker = plaita.spawn(
        "worker",
        "worker",
        "--flows",
        "examples/flows",
        "--handler-modules",
        "examples.handlers",
        "--read-block-ms",
        "100",
        "--concurrency",
        "4",
    )
    doomed_consumer = f"doomed-{uuid.uuid4().hex[:8]}"
    doomed = event_filter(
        plaita,
        "--consumer-name",
        doomed_consumer,
        # Blocked for a minute per read: the next notification is handed to this read
        # even while the process is stopped.
        "--read-block-ms",
        "60000",
        "--reconcile-interval-seconds",
        "3600",
        client_name=doomed_consumer,
    )
    plaita.run("flows", "register", "examples/flows/approval.json")
    execution_id = start(plaita, "approval", '{"amount": 5000}')
    waiting = suspended(plaita, [execution_id], worker, doomed)[execution_id]
    assert waiting["waiting_for"]["node_id"] == "wait_decision"

    poll(
        lambda: blocked_reading(plaita, doomed_consumer),
        timeout=15,
        what="the first event filter to block in XREADGROUP",
    )
    os.kill(doomed.pid, signal.SIGSTOP)
    [event] = plaita.publish([PlannedEvent("approval_decision", execution_id, {"approved": True})])
    poll(
        lambda: pending_on(plaita, doomed_consumer) == 1,
        timeout=10,
        what="the notification to be delivered to the stopped filter",
    )
    doomed.kill()  # kill -9 while stopped: its notification stays pending on a dead consumer
    doomed.wait(10)

    rescuer = event_filter(
        plaita,
        # Reclaiming would take an hour: only the reconciler can recover the event.
        "--claim-min-idle-ms",
        "3600000",
        "--reconcile-interval-seconds",
        "1",
        "--reconcile-settle-seconds",
        "1",
    )
    done = plaita.wait_for_statuses([execution_id], TERMINAL, timeout=40, alive=[worker, rescuer])
    finished = done[execution_id]

    assert finished["status"] == "completed", plaita.logs()
    assert finished["result"]["outcome"] == "shipped"
    assert "ship" in finished["node_results"] and "reject" not in finished["node_results"]
    assert finished["node_results"]["wait_decision"]["data"] == {"approved": True}
    rescuer_log = plaita.log_of(rescuer)
    assert "event=reconcile.resumes_enqueued event_id=" + event["event_id"] in rescuer_log
    assert pending_on(plaita, doomed_consumer) == 1, "recovered by the reconciler, not reclaimed"
    assert plaita.stop(rescuer) == 0, plaita.logs()
    assert plaita.stop(worker) == 0, plaita.logs()


def test_event_filter_refuses_an_unusable_reconcile_interval(plaita: Plaita) -> None:
    for value in ("nan", "inf", "0", "-5"):
        refused = plaita.run(
            "event-filter", "--reconcile-interval-seconds", value, check=False, timeout=30
        )
        assert refused.returncode == 2, refused.stderr
        assert "--reconcile-interval-seconds must be a finite number of seconds > 0" in (
            refused.stderr
        )


# --- V8: timers survive the worker that scheduled them ------------------------------------


def timer_worker(plaita: Plaita, name: str) -> subprocess.Popen[bytes]:
    share_fault_timings(plaita)
    return plaita.spawn(name, *worker_args(f"{name}-{uuid.uuid4().hex[:8]}", concurrency=4))


def register_timer_flows(plaita: Plaita) -> None:
    plaita.run("flows", "register", *TIMER_FLOWS, "--handler-modules", HANDLER_MODULE)


def kill_before_due(process: subprocess.Popen[bytes], wake_at_ms: int) -> None:
    process.kill()
    process.wait(10)
    assert now_ms() < wake_at_ms - 200, (
        "the worker was killed too late to prove anything: the timer was (nearly) due"
    )


def test_a_sleep_timer_fires_after_its_worker_was_killed(plaita: Plaita) -> None:
    register_timer_flows(plaita)
    first = timer_worker(plaita, "first")
    execution_id = start(plaita, "timer_sleep")
    waiting = suspended(plaita, [execution_id], first)[execution_id]
    assert waiting["waiting_for"]["node_id"] == "nap"
    wake_at_ms = waiting["waiting_for"]["wake_at_ms"]
    assert wake_at_ms >= waiting["updated_at_ms"] + 1900

    kill_before_due(first, wake_at_ms)
    second = timer_worker(plaita, "second")
    finished = plaita.wait_for_statuses([execution_id], TERMINAL, timeout=30, alive=[second])[
        execution_id
    ]

    assert finished["status"] == "completed", plaita.logs()
    assert finished["updated_at_ms"] >= wake_at_ms
    assert runs(plaita, execution_id, "after") == 1
    assert pids(plaita, execution_id, "after") == [second.pid]
    assert plaita.stop(second) == 0, plaita.logs()


def test_an_event_timeout_takes_its_branch_after_the_worker_was_killed(plaita: Plaita) -> None:
    register_timer_flows(plaita)
    first = timer_worker(plaita, "first")
    execution_id = start(plaita, "timer_event")
    waiting = suspended(plaita, [execution_id], first)[execution_id]
    assert waiting["waiting_for"]["node_id"] == "wait"
    wake_at_ms = waiting["waiting_for"]["wake_at_ms"]

    kill_before_due(first, wake_at_ms)
    second = timer_worker(plaita, "second")
    finished = plaita.wait_for_statuses([execution_id], TERMINAL, timeout=30, alive=[second])[
        execution_id
    ]

    assert finished["status"] == "completed", plaita.logs()
    assert finished["updated_at_ms"] >= wake_at_ms
    assert finished["node_results"]["wait"] == {"timeout": True}
    assert "on_event" not in finished["node_results"]
    assert (runs(plaita, execution_id, "on_timeout"), runs(plaita, execution_id, "on_event")) == (
        1,
        0,
    )
    assert pids(plaita, execution_id, "on_timeout") == [second.pid]


# --- V6 + V8: an event racing its timeout resumes the wait once ---------------------------

#: When each execution's event is published, relative to its timeout's due time (ms).
RACE_OFFSETS_MS = (-40, -15, -5, 0, 0, 0, 5, 15, 40)


def settled(plaita: Plaita) -> bool:
    """No timer waits, and every notification and task carrier was read and acked: no
    loser of a race is still on its way."""
    client = plaita.redis()
    if client.zcard(plaita.key("q:{default}:delayed")):
        return False
    for stream, group_name in (
        (plaita.key("events:stream"), EVENT_FILTER_GROUP),
        (plaita.stream, "plaita-workers"),
    ):
        [group] = [g for g in client.xinfo_groups(stream) if g["name"] == group_name]
        if int(group["pending"]) or group.get("lag"):
            return False
    return True


def test_an_event_racing_its_timeout_runs_exactly_one_branch(plaita: Plaita) -> None:
    register_timer_flows(plaita)
    worker = timer_worker(plaita, "worker")
    events = event_filter(plaita)
    execution_ids = plaita.start_executions("timer_event", len(RACE_OFFSETS_MS))
    waiting = suspended(plaita, execution_ids, worker, events)

    plan = [
        PlannedEvent(
            "timer_test_decision",
            execution_id,
            {"offset_ms": offset},
            at_ms=waiting[execution_id]["waiting_for"]["wake_at_ms"] + offset,
        )
        for execution_id, offset in zip(execution_ids, RACE_OFFSETS_MS, strict=True)
    ]
    assert all(p.at_ms is not None and p.at_ms > now_ms() for p in plan), (
        "the executions took too long to suspend: their timeouts passed before the race"
    )
    plaita.publish(plan)
    finished = plaita.wait_for_statuses(execution_ids, TERMINAL, timeout=30, alive=[worker, events])
    poll(lambda: settled(plaita), timeout=15, what="every timer and carrier to be consumed")

    for execution_id, offset in zip(execution_ids, RACE_OFFSETS_MS, strict=True):
        view = finished[execution_id]
        assert view["status"] == "completed", plaita.logs()
        ran = {node: runs(plaita, execution_id, node) for node in ("on_event", "on_timeout")}
        # Which side wins is timing (both do, run to run); that the wait resumed once is not.
        assert sorted(ran.values()) == [0, 1], f"offset {offset} ms: branch runs {ran}"
        [winner] = [node for node, count in ran.items() if count == 1]
        loser = "on_timeout" if winner == "on_event" else "on_event"
        assert winner in view["node_results"] and loser not in view["node_results"]
        if winner == "on_event":
            assert view["node_results"]["wait"]["data"] == {"offset_ms": offset}
        else:
            assert view["node_results"]["wait"] == {"timeout": True}
