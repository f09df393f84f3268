"""Fault tests: real ``plaita worker`` processes on a real Redis, broken on purpose (R3, R4).

Every task of ``flows/fault_chain.json`` (a → b → c → d → end) runs
``tests.integration.fault_handlers:step``, which counts each run and records the pid that ran
it in Redis, so a test can tell, across processes, which node ran how often and where.
Timings are small (lease TTL 3 s, reclaim after 1.5 s idle, 100 ms reads) so each test takes
seconds; every wait is a bounded poll, and every process is stopped by the fixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from typing import Any

import attrs
import pytest

from . import fault_handlers
from .conftest import (
    FLOW_FILE,
    FLOW_ID,
    GROUP,
    HANDLER_MODULE,
    LEASE_TTL_SECONDS,
    NODES,
    REPO_ROOT,
    TERMINAL,
    Plaita,
    plaita_command,
    poll,
    requires_redis,
    share_fault_timings,
    worker_args,
)

pytestmark = [requires_redis, pytest.mark.process]


@pytest.fixture(autouse=True)
def fault_pool(plaita: Plaita) -> None:
    share_fault_timings(plaita)


@attrs.frozen
class Worker:
    process: subprocess.Popen[bytes]
    consumer: str

    @property
    def pid(self) -> int:
        return self.process.pid


def start_workers(
    plaita: Plaita,
    *names: str,
    concurrency: int = 2,
    env: dict[str, str] | None = None,
) -> list[Worker]:
    """Spawn workers with the fault-test timings, all at once, and wait until they run."""
    workers = []
    for name in names:
        consumer = f"{name}-{uuid.uuid4().hex[:8]}"
        process = plaita.spawn(name, *worker_args(consumer, concurrency=concurrency), env=env)
        workers.append(Worker(process, consumer))

    def started() -> bool:
        for worker in workers:
            assert worker.process.poll() is None, f"a worker exited early\n{plaita.logs()}"
        return all("worker.started" in plaita.log_of(w.process) for w in workers)

    # Readiness only spreads the work over the workers; no assertion depends on it, so a
    # renamed log event costs a few seconds, not a failure.
    with contextlib.suppress(AssertionError):
        poll(started, timeout=10, interval=0.1, what="the workers to start")
    for worker in workers:
        assert worker.process.poll() is None, f"a worker exited early\n{plaita.logs()}"
    return workers


def start_worker(plaita: Plaita, name: str, *, concurrency: int = 2) -> Worker:
    (worker,) = start_workers(plaita, name, concurrency=concurrency)
    return worker


def start_executions(plaita: Plaita, inputs: list[dict[str, Any]]) -> list[str]:
    """``plaita executions start fault_chain --json`` for each input, all at once."""
    commands = [
        subprocess.Popen(
            [
                *plaita_command(),
                "executions",
                "start",
                FLOW_ID,
                "--input",
                json.dumps(value),
                "--json",
            ],
            cwd=REPO_ROOT,
            env=plaita.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for value in inputs
    ]
    ids = []
    for command in commands:
        out, err = command.communicate(timeout=30)
        assert command.returncode == 0, f"executions start failed: {err}"
        ids.append(json.loads(out)["execution_id"])
    return ids


def register_flow(plaita: Plaita) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)


def plan_all(**step: Any) -> dict[str, dict[str, Any]]:
    return {node: dict(step) for node in NODES}


# --- evidence left by the handlers ------------------------------------------------------


def runs(plaita: Plaita, execution_id: str, node: str) -> int:
    value = plaita.redis().get(fault_handlers.runs_key(plaita.namespace, execution_id, node))
    return int(value or 0)


def done(plaita: Plaita, execution_id: str, node: str) -> int:
    value = plaita.redis().get(fault_handlers.done_key(plaita.namespace, execution_id, node))
    return int(value or 0)


def pids(plaita: Plaita, execution_id: str, node: str) -> list[int]:
    key = fault_handlers.pids_key(plaita.namespace, execution_id, node)
    return [int(pid) for pid in plaita.redis().lrange(key, 0, -1)]


def run_counts(plaita: Plaita, execution_id: str) -> dict[str, int]:
    return {node: runs(plaita, execution_id, node) for node in NODES}


# --- the task stream --------------------------------------------------------------------


def pending_ids(plaita: Plaita) -> set[str]:
    entries = plaita.redis().xpending_range(plaita.stream, GROUP, min="-", max="+", count=10_000)
    return {entry["message_id"] for entry in entries}


def carriers(plaita: Plaita) -> list[tuple[str, dict[str, str]]]:
    return [(message_id, fields) for message_id, fields in plaita.redis().xrange(plaita.stream)]


def carrier_execution_id(fields: dict[str, str]) -> str | None:
    try:
        document = json.loads(fields.get("envelope", ""))
    except ValueError:
        return None
    return document.get("execution_id") if isinstance(document, dict) else None


def stream_id(message_id: str) -> tuple[int, int]:
    ms, _, seq = message_id.partition("-")
    return int(ms), int(seq)


def acked_ids(plaita: Plaita) -> set[str]:
    """Entries the group delivered and nobody holds pending any more."""
    groups = plaita.redis().xinfo_groups(plaita.stream)
    (group,) = [g for g in groups if g["name"] == GROUP]
    delivered_up_to = stream_id(group["last-delivered-id"])
    pending = pending_ids(plaita)
    return {
        message_id
        for message_id, _ in carriers(plaita)
        if stream_id(message_id) <= delivered_up_to and message_id not in pending
    }


def wait_until_no_pending(plaita: Plaita, timeout: float = 12) -> None:
    """Every carrier is eventually acked (a copy left pending on a conflict is reclaimed)."""
    deadline = time.monotonic() + timeout
    while pending := pending_ids(plaita):
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"carriers still pending after {timeout} s: {pending}\n{plaita.logs()}"
            )
        time.sleep(0.2)


def comparable(view: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on how often a carrier was delivered: no ids, times or pids."""
    return {
        "status": view["status"],
        "result": view["result"],
        "error": view["error"],
        "last_node_id": view["last_node_id"],
        "steps": view["steps"],
        "node_results": {
            node: {k: v for k, v in result.items() if k != "pid"}
            if isinstance(result, dict)
            else result
            for node, result in view["node_results"].items()
        },
    }


def expected_result(n: int) -> dict[str, Any]:
    return {"n": n, "nodes": list(NODES)}


# --- R3: kill -9 mid-step -----------------------------------------------------------------


def test_kill_9_mid_step_loses_no_execution_and_reruns_only_the_node_in_flight(
    plaita: Plaita,
) -> None:
    register_flow(plaita)
    victim, survivor = start_workers(plaita, "victim", "survivor", concurrency=3)
    inputs = [{"n": n, "plan": plan_all(sleep=0.8)} for n in range(6)]
    ids = start_executions(plaita, inputs)

    def victim_inside_steps() -> set[tuple[str, str]]:
        """(execution, node) pairs whose handler the victim started and has not finished."""
        return {
            (execution_id, node)
            for execution_id in ids
            for node in NODES
            if (ran_by := pids(plaita, execution_id, node))[-1:] == [victim.pid]
            and done(plaita, execution_id, node) < len(ran_by)
        }

    # Kill right after the victim enters a step (seen on this poll and not on the previous
    # one), so the 0.8 s step is surely still running when the signal lands.
    earlier = victim_inside_steps()

    def victim_just_entered_a_step() -> bool:
        nonlocal earlier
        now = victim_inside_steps()
        fresh, earlier = now - earlier, now
        return bool(fresh)

    poll(
        victim_just_entered_a_step, timeout=15, what=f"the victim to start a step\n{plaita.logs()}"
    )
    os.kill(victim.pid, signal.SIGKILL)
    victim.process.wait(5)
    # The victim's executions stay frozen until its lease expires, so this is exactly what
    # was checkpointed, and which steps were cut short, when it died.
    interrupted = victim_inside_steps()
    checkpointed = {
        execution_id: set() if view is None else set(view["node_results"])
        for execution_id, view in plaita.states(ids).items()
    }
    assert interrupted

    final = plaita.wait_for_statuses(ids, TERMINAL, timeout=30, alive=[survivor.process])

    for n, execution_id in enumerate(ids):
        view = final[execution_id]
        assert view["status"] == "completed", (view, plaita.logs())
        assert view["result"] == expected_result(n)
        twice = []
        for node in NODES:
            count, ran_by = runs(plaita, execution_id, node), pids(plaita, execution_id, node)
            assert 1 <= count <= 2, (execution_id, node, ran_by)
            if node in checkpointed[execution_id]:
                assert count == 1, f"{node} was checkpointed before the kill but ran {ran_by}"
            if count == 2:
                # Only a node the victim had started and not checkpointed may run again.
                assert ran_by[0] == victim.pid and node not in checkpointed[execution_id], (
                    execution_id,
                    node,
                    ran_by,
                    checkpointed[execution_id],
                )
                twice.append(node)
        assert len(twice) <= 1, f"{execution_id}: several nodes ran twice: {twice}"
    # A step the kill cut short ran once more, on the survivor, which wrote its result.
    for execution_id, node in interrupted:
        assert pids(plaita, execution_id, node) == [victim.pid, survivor.pid]
        assert final[execution_id]["node_results"][node]["pid"] == survivor.pid
    assert survivor.process.poll() is None, plaita.logs()
    wait_until_no_pending(plaita)
    assert plaita.redis().xlen(plaita.dead_letters) == 0
    assert plaita.stop(survivor.process) == 0, plaita.logs()


def test_worker_that_crashes_inside_a_step_is_replaced_and_only_that_step_runs_again(
    plaita: Plaita,
) -> None:
    register_flow(plaita)
    workers = start_workers(plaita, "w0", "w1", concurrency=2)
    # Node b calls os._exit on its first run, in whichever worker runs it.
    (execution_id,) = start_executions(plaita, [{"n": 3, "plan": {"b": {"crash": "first"}}}])
    crashed = poll(
        lambda: [w for w in workers if w.process.poll() is not None],
        timeout=15,
        what=f"a worker to crash in b\n{plaita.logs()}",
    )
    assert [w.process.returncode for w in crashed] == [70]
    (survivor,) = [w for w in workers if w not in crashed]

    final = plaita.wait_for_statuses([execution_id], TERMINAL, alive=[survivor.process])
    view = final[execution_id]
    assert view["status"] == "completed", (view, plaita.logs())
    assert view["result"] == expected_result(3)
    assert run_counts(plaita, execution_id) == {"a": 1, "b": 2, "c": 1, "d": 1}
    assert pids(plaita, execution_id, "b") == [crashed[0].pid, survivor.pid]
    assert {view["node_results"][node]["pid"] for node in ("b", "c", "d")} == {survivor.pid}
    wait_until_no_pending(plaita)
    assert plaita.redis().xlen(plaita.dead_letters) == 0
    assert plaita.stop(survivor.process) == 0, plaita.logs()


# --- R3, W4: SIGSTOP past the lease ---------------------------------------------------


def test_sigstopped_holder_past_its_lease_is_fenced_off_when_it_wakes(plaita: Plaita) -> None:
    register_flow(plaita)
    holder = start_worker(plaita, "holder", concurrency=1)
    (execution_id,) = start_executions(plaita, [{"n": 7, "plan": {"b": {"sleep": 2.5}}}])
    poll(
        lambda: pids(plaita, execution_id, "b") == [holder.pid],
        timeout=15,
        what=f"the holder to start node b\n{plaita.logs()}",
    )
    os.kill(holder.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        assert done(plaita, execution_id, "b") == 0, "the holder must be stopped inside b"
        successor = start_worker(plaita, "successor", concurrency=1)
        taken_over = plaita.wait_for_statuses(
            [execution_id], TERMINAL, timeout=25, alive=[successor.process]
        )[execution_id]
        assert time.monotonic() - stopped_at > LEASE_TTL_SECONDS
        assert holder.process.poll() is None
    finally:
        os.kill(holder.pid, signal.SIGCONT)

    assert taken_over["status"] == "completed", (taken_over, plaita.logs())
    assert taken_over["result"] == expected_result(7)
    # The successor wrote b and everything after it.
    assert {node: taken_over["node_results"][node]["pid"] for node in ("b", "c", "d")} == {
        "b": successor.pid,
        "c": successor.pid,
        "d": successor.pid,
    }

    # The stale holder wakes up inside b, finishes the handler and tries to write its step.
    poll(
        lambda: done(plaita, execution_id, "b") == 2,
        timeout=10,
        what=f"the woken holder to finish its run of b\n{plaita.logs()}",
    )
    poll(
        lambda: _mentions_rejection(plaita.log_of(holder.process), execution_id),
        timeout=10,
        what=f"the woken holder to report its step rejected\n{plaita.logs()}",
    )
    # Its late write was refused: the state is exactly what the successor left, and no node
    # after the takeover point ran again.
    for _ in range(10):
        assert plaita.states([execution_id])[execution_id] == taken_over
        time.sleep(0.1)
    assert pids(plaita, execution_id, "a") == [holder.pid]
    assert pids(plaita, execution_id, "b") == [holder.pid, successor.pid]
    assert pids(plaita, execution_id, "c") == [successor.pid]
    assert pids(plaita, execution_id, "d") == [successor.pid]
    wait_until_no_pending(plaita)
    # The woken holder is a healthy worker again and drains cleanly.
    assert holder.process.poll() is None, plaita.logs()
    assert plaita.stop(holder.process) == 0, plaita.logs()
    assert plaita.stop(successor.process) == 0, plaita.logs()


def _mentions_rejection(log: str, execution_id: str) -> bool:
    markers = ("fenced", "lease_lost", "ExecutionLeaseError", "LeaseLostError", "lease.lost")
    return any(
        execution_id in line and any(marker in line for marker in markers)
        for line in log.splitlines()
    )


# --- R3: Redis connections dropped ----------------------------------------------------


def test_workers_recover_when_their_redis_connections_are_killed(plaita: Plaita) -> None:
    register_flow(plaita)
    # Only this test's workers carry this client name, so killing by it never touches another
    # client of a shared Redis (nor this test's own connection, nor the handlers' evidence).
    client_name = f"{plaita.namespace}-worker"
    separator = "&" if "?" in plaita.redis_url else "?"
    env = {"PLAITA_REDIS_URL": f"{plaita.redis_url}{separator}client_name={client_name}"}
    workers = start_workers(plaita, "w0", "w1", concurrency=3, env=env)
    ids = start_executions(plaita, [{"n": n, "plan": plan_all(sleep=0.3)} for n in range(6)])
    poll(
        lambda: any(runs(plaita, execution_id, "a") for execution_id in ids),
        timeout=15,
        what="the first step to start",
    )

    killed = 0
    for _ in range(4):
        for entry in plaita.redis().client_list():
            if entry.get("name") == client_name:
                killed += plaita.redis().execute_command("CLIENT", "KILL", "ID", entry["id"])
        time.sleep(0.7)
    assert killed > 0, "the workers' connections were never found"

    final = plaita.wait_for_statuses(
        ids, TERMINAL, timeout=30, alive=[worker.process for worker in workers]
    )
    for n, execution_id in enumerate(ids):
        assert final[execution_id]["status"] == "completed", (final[execution_id], plaita.logs())
        assert final[execution_id]["result"] == expected_result(n)
        assert all(count >= 1 for count in run_counts(plaita, execution_id).values())
    for worker in workers:
        assert worker.process.poll() is None, f"a worker died\n{plaita.logs()}"
    wait_until_no_pending(plaita)
    for worker in workers:
        assert plaita.stop(worker.process) == 0, plaita.logs()


# --- R3, W6: every carrier delivered twice ---------------------------------------------


def test_every_start_carrier_delivered_twice_gives_the_single_delivery_outcome(
    plaita: Plaita,
) -> None:
    register_flow(plaita)
    plan = {"a": {"sleep": 0.3}, "c": {"sleep": 0.2}}
    inputs = [{"n": n, "plan": plan} for n in range(4)]
    # One execution ends in error: a duplicate must not change a failure either.
    inputs.append({"n": 4, "plan": {**plan, "c": {"fail": "deterministic"}}})
    single = start_executions(plaita, inputs)
    doubled = start_executions(plaita, inputs)
    starts = {carrier_execution_id(fields): fields for _, fields in carriers(plaita)}
    assert set(doubled) <= set(starts)
    for execution_id in doubled:
        plaita.redis().xadd(plaita.stream, starts[execution_id])
    assert plaita.redis().xlen(plaita.stream) == len(single) + 2 * len(doubled)

    workers = start_workers(plaita, "w0", "w1", concurrency=4)
    final = plaita.wait_for_statuses(
        single + doubled, TERMINAL, timeout=30, alive=[w.process for w in workers]
    )

    for n, (once, twice) in enumerate(zip(single, doubled, strict=True)):
        if n < 4:
            assert final[once]["status"] == "completed", (final[once], plaita.logs())
            assert final[once]["result"] == expected_result(n)
            expected_runs = dict.fromkeys(NODES, 1)
        else:
            assert final[once]["status"] == "error", (final[once], plaita.logs())
            assert final[once]["error"]["node_id"] == "c"
            expected_runs = {"a": 1, "b": 1, "c": 1, "d": 0}
        assert comparable(final[twice]) == comparable(final[once])
        assert run_counts(plaita, once) == expected_runs
        assert run_counts(plaita, twice) == expected_runs, pids_by_node(plaita, twice)
    # Each copy is settled too: acked, nothing left pending, nothing dead-lettered.
    wait_until_no_pending(plaita)
    assert plaita.redis().xlen(plaita.dead_letters) == 0
    for execution_id in single + doubled:
        assert plaita.states([execution_id])[execution_id] == final[execution_id]
    for worker in workers:
        assert plaita.stop(worker.process) == 0, plaita.logs()


def pids_by_node(plaita: Plaita, execution_id: str) -> dict[str, list[int]]:
    return {node: pids(plaita, execution_id, node) for node in NODES}


# --- W17: SIGTERM during a long node ---------------------------------------------------


def test_sigterm_during_a_long_node_acks_only_what_completed_and_exits_zero(
    plaita: Plaita,
) -> None:
    register_flow(plaita)
    worker = start_worker(plaita, "drained", concurrency=2)
    (busy,) = start_executions(plaita, [{"n": 1, "plan": {"b": {"sleep": 2.5}}}])
    poll(
        lambda: pids(plaita, busy, "b") == [worker.pid],
        timeout=15,
        what=f"the worker to start the long node\n{plaita.logs()}",
    )
    worker.process.send_signal(signal.SIGTERM)
    # Started after the drain began: the draining worker must not run it.
    (late,) = start_executions(plaita, [{"n": 2, "plan": {}}])
    assert worker.process.wait(20) == 0, plaita.logs()

    by_execution: dict[str, list[str]] = {}
    for message_id, fields in carriers(plaita):
        by_execution.setdefault(carrier_execution_id(fields) or "?", []).append(message_id)
    acked = acked_ids(plaita)
    states = plaita.states([busy, late])

    # The long node was not abandoned: it ran to its end.
    assert runs(plaita, busy, "b") == done(plaita, busy, "b") == 1
    for execution_id in (busy, late):
        view = states[execution_id]
        finished = view is not None and view["status"] in {"completed", "suspended"} | TERMINAL
        live_carriers = [m for m in by_execution[execution_id] if m not in acked]
        for message_id in by_execution[execution_id]:
            if message_id in acked:
                # Acked ⇒ its dispatch completed: every node it started ran to its end...
                for node in NODES:
                    assert runs(plaita, execution_id, node) == done(plaita, execution_id, node)
        # ...and an execution that is not finished always keeps a carrier (I0).
        assert finished or live_carriers, (execution_id, view, by_execution, acked)
    # Nothing read after the drain began was dispatched.
    assert run_counts(plaita, late) == dict.fromkeys(NODES, 0)
    assert not set(by_execution[late]) & acked

    # Whatever was left is finished by the next worker, without re-running checkpointed nodes.
    checkpointed = {
        execution_id: set() if view is None else set(view["node_results"])
        for execution_id, view in states.items()
    }
    successor = start_worker(plaita, "successor", concurrency=2)
    final = plaita.wait_for_statuses([busy, late], TERMINAL, timeout=25, alive=[successor.process])
    for n, execution_id in enumerate((busy, late), start=1):
        assert final[execution_id]["status"] == "completed", (final[execution_id], plaita.logs())
        assert final[execution_id]["result"] == expected_result(n)
        for node in checkpointed[execution_id]:
            if node in NODES:
                assert runs(plaita, execution_id, node) == 1, (execution_id, node)
    assert plaita.stop(successor.process) == 0, plaita.logs()


# --- R4: malformed carriers -----------------------------------------------------------


def test_malformed_carriers_go_to_the_dlq_with_evidence_and_the_worker_keeps_running(
    plaita: Plaita,
) -> None:
    register_flow(plaita)
    worker = start_worker(plaita, "sturdy", concurrency=2)
    never_run = f"never-{uuid.uuid4().hex}"
    valid_document = {
        "kind": "start",
        "execution_id": never_run,
        "flow_id": FLOW_ID,
        "timestamp_ms": int(time.time() * 1000),
        "params": {"n": 0, "plan": {}},
    }
    bad_entries = {
        "not_json": {"envelope": "{this is not json", "schema_version": "1"},
        "no_envelope": {"something": "else"},
        "missing_fields": {"envelope": json.dumps({"kind": "start"}), "schema_version": "1"},
        "schema_too_new": {"envelope": json.dumps(valid_document), "schema_version": "99"},
        "schema_not_a_number": {"envelope": json.dumps(valid_document), "schema_version": "x"},
    }
    message_ids = {
        name: plaita.redis().xadd(plaita.stream, fields) for name, fields in bad_entries.items()
    }

    def dead_letters() -> list[dict[str, str]]:
        return [fields for _, fields in plaita.redis().xrange(plaita.dead_letters)]

    poll(
        lambda: len(dead_letters()) >= len(bad_entries),
        timeout=15,
        what=f"every malformed entry in the DLQ\n{plaita.logs()}",
    )
    letters = dead_letters()
    assert len(letters) == len(bad_entries), letters
    for name, message_id in message_ids.items():
        (letter,) = [entry for entry in letters if message_id in entry.values()] or pytest.fail(
            f"no dead letter names {name} ({message_id}): {letters}"
        )
        assert letter.get("reason"), (name, letter)
        assert _carries_raw_fields(letter, bad_entries[name]), (name, letter)
        if name.startswith("schema"):
            assert "schema" in letter["reason"].lower(), (name, letter)
    assert not set(message_ids.values()) & pending_ids(plaita)
    assert plaita.states([never_run])[never_run] is None
    assert run_counts(plaita, never_run) == dict.fromkeys(NODES, 0)

    # The worker is still there and still works.
    assert worker.process.poll() is None, plaita.logs()
    (execution_id,) = start_executions(plaita, [{"n": 5, "plan": {}}])
    final = plaita.wait_for_statuses([execution_id], TERMINAL, timeout=20, alive=[worker.process])[
        execution_id
    ]
    assert final["status"] == "completed", (final, plaita.logs())
    assert final["result"] == expected_result(5)
    assert run_counts(plaita, execution_id) == dict.fromkeys(NODES, 1)
    assert plaita.stop(worker.process) == 0, plaita.logs()


def _carries_raw_fields(letter: dict[str, str], raw: dict[str, str]) -> bool:
    """The dead letter keeps the entry's fields as they arrived: as one JSON object, or inline."""
    for value in letter.values():
        try:
            if json.loads(value) == raw:
                return True
        except ValueError:
            continue
    return all(letter.get(key) == value for key, value in raw.items())
