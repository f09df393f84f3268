"""Poison carriers: real ``plaita worker`` processes on a real Redis (E15, W2, W8, W9, W10, R4).

A node that always fails, a node that kills its worker on every run, and the one-time replay
of what they leave in the dead-letter queue. Every task of ``flows/fault_chain.json``
(a → b → c → d → end) runs ``tests.integration.fault_handlers:step``, which counts its runs
in Redis. Timings are small (reclaim after 1.5 s idle, lease TTL 3 s, 100 ms reads,
``--max-deliveries 2`` crashed attempts, ``--default-retries 2``) so each test takes
seconds; every wait is a bounded poll, and every process is stopped by pid (by the fixture
at the latest).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from typing import Any

import pytest

from . import fault_handlers
from .conftest import (
    FLOW_FILE,
    FLOW_ID,
    GROUP,
    HANDLER_MODULE,
    NODES,
    REPO_ROOT,
    TERMINAL,
    Plaita,
    poll,
    requires_redis,
    share_fault_timings,
    worker_args,
)

pytestmark = [requires_redis, pytest.mark.process]

MAX_DELIVERIES = 2
DEFAULT_RETRIES = 2


@pytest.fixture(autouse=True)
def poison_pool(plaita: Plaita) -> None:
    """The whole pool (workers, CLI) shares the short timings and budgets (W12)."""
    share_fault_timings(plaita, max_deliveries=MAX_DELIVERIES)
    plaita.share(default_retries=DEFAULT_RETRIES)


# --- processes --------------------------------------------------------------------------


def spawn_worker(plaita: Plaita, name: str, *, concurrency: int = 1) -> subprocess.Popen[bytes]:
    """A worker with the poison-test timings; returns once it runs (or has exited)."""
    consumer = f"{name}-{uuid.uuid4().hex[:8]}"
    process = plaita.spawn(name, *worker_args(consumer, concurrency=concurrency))
    poll(
        lambda: process.poll() is not None or "worker.started" in plaita.log_of(process),
        timeout=15,
        interval=0.05,
        what=f"worker {name} to start\n{plaita.logs()}",
    )
    started = "worker.started" in plaita.log_of(process)
    assert started, f"worker {name} exited at start-up\n{plaita.logs()}"
    return process


def register_flow(plaita: Plaita) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)


def start_execution(plaita: Plaita, plan: dict[str, Any]) -> str:
    started = plaita.json(
        "executions", "start", FLOW_ID, "--input", json.dumps({"n": 1, "plan": plan})
    )
    return str(started["execution_id"])


# --- evidence ---------------------------------------------------------------------------


def runs(plaita: Plaita, execution_id: str, node: str) -> int:
    value = plaita.redis().get(fault_handlers.runs_key(plaita.namespace, execution_id, node))
    return int(value or 0)


def run_counts(plaita: Plaita, execution_id: str) -> dict[str, int]:
    return {node: runs(plaita, execution_id, node) for node in NODES}


def carriers_of(plaita: Plaita, execution_id: str) -> dict[str, dict[str, str]]:
    """Every task-stream entry that names ``execution_id``, acked or not, by message id."""
    found = {}
    for message_id, fields in plaita.redis().xrange(plaita.stream):
        try:
            document = json.loads(fields.get("envelope", ""))
        except ValueError:
            continue
        if isinstance(document, dict) and document.get("execution_id") == execution_id:
            found[message_id] = fields
    return found


def pending(plaita: Plaita) -> dict[str, int]:
    """Pending entries of the workers' group: message id → times delivered."""
    entries = plaita.redis().xpending_range(plaita.stream, GROUP, min="-", max="+", count=10_000)
    return {entry["message_id"]: int(entry["times_delivered"]) for entry in entries}


def _stream_id(message_id: str) -> tuple[int, int]:
    ms, _, seq = message_id.partition("-")
    return int(ms), int(seq)


def live_carriers(plaita: Plaita, execution_id: str) -> set[str]:
    """The execution's carriers nobody acked: pending, or not yet delivered to the group."""
    (group,) = [g for g in plaita.redis().xinfo_groups(plaita.stream) if g["name"] == GROUP]
    delivered_up_to = _stream_id(group["last-delivered-id"])
    held = pending(plaita)
    return {
        message_id
        for message_id in carriers_of(plaita, execution_id)
        if message_id in held or _stream_id(message_id) > delivered_up_to
    }


def dead_letters(plaita: Plaita) -> list[tuple[str, dict[str, str]]]:
    return list(plaita.redis().xrange(plaita.dead_letters))


def carries_raw_fields(letter: dict[str, str], raw: dict[str, str]) -> bool:
    """The dead letter keeps the entry's fields as they arrived: as one JSON object, or inline."""
    for value in letter.values():
        try:
            if json.loads(value) == raw:
                return True
        except ValueError:
            continue
    return all(letter.get(key) == value for key, value in raw.items())


def wait_until_no_pending(plaita: Plaita, timeout: float = 10) -> None:
    poll(
        lambda: not pending(plaita),
        timeout=timeout,
        interval=0.1,
        what=f"no carrier left pending ({pending(plaita)})\n{plaita.logs()}",
    )


def log_events(plaita: Plaita, prefix: str) -> list[dict[str, str]]:
    """``event=<prefix>…`` lines of every worker log, as their ``key=value`` fields, in order."""
    found = []
    for process, _ in plaita.processes:
        for line in plaita.log_of(process).splitlines():
            match = re.search(r"event=(" + re.escape(prefix) + r"\S*)", line)
            if match:
                pairs = re.findall(r"(\w+)=('[^']*'|\"[^\"]*\"|\S+)", line[match.start() :])
                found.append({key: value.rstrip(":") for key, value in pairs})
    return found


# --- W8, W9: a node that always fails transiently --------------------------------------


def run_always_failing_node(plaita: Plaita) -> tuple[str, subprocess.Popen[bytes], str]:
    """Run an execution whose node ``a`` always fails transiently, to its end.

    Returns the execution id, the (still running) worker and the dead letter's id.
    """
    register_flow(plaita)
    worker = spawn_worker(plaita, "retrier", concurrency=2)
    execution_id = start_execution(plaita, {"a": {"fail": "transient", "times": 1000}})
    # Retries wait 1 s, then 2 s on the delay queue: the third run is the last.
    view = plaita.wait_for_statuses([execution_id], TERMINAL, timeout=20, alive=[worker])[
        execution_id
    ]
    assert view["status"] == "error", (view, plaita.logs())
    letters = poll(
        lambda: dead_letters(plaita),
        timeout=10,
        what=f"the failed carrier in the DLQ\n{plaita.logs()}",
    )
    assert len(letters) == 1, letters
    return execution_id, worker, letters[0][0]


def test_node_that_always_fails_transiently_ends_in_error_and_its_carrier_in_the_dlq(
    plaita: Plaita,
) -> None:
    execution_id, worker, dlq_id = run_always_failing_node(plaita)
    view = plaita.states([execution_id])[execution_id]
    assert view is not None

    # W8: terminal error naming the node and how often it was retried.
    error = view["error"]
    assert error["node_id"] == "a", error
    assert f"after {DEFAULT_RETRIES} retries" in error["message"], error
    # The handler ran once plus once per retry, and nothing after it ran.
    assert run_counts(plaita, execution_id) == {"a": 1 + DEFAULT_RETRIES, "b": 0, "c": 0, "d": 0}
    retries = [
        e for e in log_events(plaita, "node.retry_scheduled") if e["execution_id"] == execution_id
    ]
    assert [(e["retry"], e["delay_ms"]) for e in retries] == [("1", "1000"), ("2", "2000")]

    # Its last carrier is in the DLQ with the reason and its raw fields as evidence.
    ((_, letter),) = dead_letters(plaita)
    assert letter.get("reason"), letter
    assert "budget" in letter["reason"], letter
    message_id = letter.get("message_id")
    carriers = carriers_of(plaita, execution_id)
    assert message_id in carriers, (letter, carriers)
    assert carries_raw_fields(letter, carriers[message_id]), (letter, carriers[message_id])
    shown = plaita.json("dlq", "show", dlq_id)
    assert shown["execution_id"] == execution_id
    assert shown["message_id"] == message_id
    assert shown["replayed"] is None
    # One start carrier plus one copy per retry; none of them stays pending.
    assert len(carriers) == 1 + DEFAULT_RETRIES, carriers
    wait_until_no_pending(plaita)
    assert not live_carriers(plaita, execution_id)

    assert worker.poll() is None, plaita.logs()
    assert plaita.stop(worker) == 0, plaita.logs()


# --- W2, W9, I0: a node that kills its worker on every run -----------------------------


@pytest.mark.parametrize(
    "crash_node",
    [
        pytest.param("b", id="after-a-checkpoint"),
        pytest.param("a", id="before-any-checkpoint"),
    ],
)
def test_step_that_crashes_every_worker_is_guarded_and_never_left_without_a_carrier(
    plaita: Plaita, crash_node: str
) -> None:
    register_flow(plaita)
    execution_id = start_execution(plaita, {crash_node: {"crash": "always"}})
    ((start_id, start_fields),) = carriers_of(plaita, execution_id).items()

    def guarded() -> list[tuple[str, dict[str, str]]]:
        return [(i, f) for i, f in dead_letters(plaita) if f.get("message_id") == start_id]

    # Workers take turns: each one that crashes is replaced, at most five times.
    crashed: list[subprocess.Popen[bytes]] = []
    deadline = time.monotonic() + 30
    for turn in range(6):
        assert time.monotonic() < deadline, f"no guard decision in time\n{plaita.logs()}"
        worker = spawn_worker(plaita, f"turn{turn}", concurrency=1)
        poll(
            lambda w=worker: w.poll() is not None or guarded(),
            timeout=12,
            interval=0.1,
            what=f"worker turn{turn} to crash or the guard to act\n{plaita.logs()}",
        )
        if worker.poll() is not None:
            assert worker.returncode == 70, plaita.logs()
            crashed.append(worker)
        if guarded():
            break
    (letter_entry,) = guarded() or pytest.fail(f"the guard never acted\n{plaita.logs()}")
    _, letter = letter_entry

    # W2: the step ran max_deliveries times, each attempt killing its worker; the dispatch
    # after them gave the carrier up — Redis's delivery count (which the reclaims skipped
    # while the dead holder's lease was live also raised) played no part.
    assert "attempts_exhausted" in letter["reason"], letter
    assert runs(plaita, execution_id, crash_node) == MAX_DELIVERIES
    assert len(crashed) == MAX_DELIVERIES, plaita.logs()

    # W9: one guard decision released it, with evidence, after making the execution
    # terminal: a recovery copy would only crash its workers again.
    assert carries_raw_fields(letter, start_fields), letter
    (decision,) = [e for e in log_events(plaita, "dlq_guard.") if e["message_id"] == start_id]
    assert decision["released"] == "True", decision
    assert decision["action"] == "terminalise_then_release", decision
    view = plaita.states([execution_id])[execution_id]
    assert view is not None, f"execution {execution_id} was lost: {decision}"
    assert view["status"] == "error", view
    assert view["error"]["kind"] == "NodeBudgetExhausted", view
    assert len(dead_letters(plaita)) == 1, "one DLQ entry per dead carrier"
    wait_until_no_pending(plaita)
    # Checkpointed nodes never ran again; nothing after the poison step ran.
    later = NODES[NODES.index(crash_node) + 1 :]
    counts = run_counts(plaita, execution_id)
    assert all(counts[node] == 1 for node in NODES[: NODES.index(crash_node)]), counts
    assert all(counts[node] == 0 for node in later), counts

    for process, _ in plaita.processes:
        plaita.stop(process)


# --- W10: replay once and only once ----------------------------------------------------


def test_a_replay_into_an_execution_that_ended_is_refused_and_keeps_the_entry(
    plaita: Plaita,
) -> None:
    """The failed execution's carrier would do nothing: the replay says so, exits 1,
    enqueues nothing and leaves the entry unreplayed (retry the execution instead)."""
    execution_id, worker, dlq_id = run_always_failing_node(plaita)
    wait_until_no_pending(plaita)
    stream_length = plaita.redis().xlen(plaita.stream)

    refused = plaita.run("dlq", "replay", dlq_id, "--json", check=False)

    assert refused.returncode == 1, refused.stderr
    answer = json.loads(refused.stdout)
    assert answer["outcome"] == "execution_ended", answer
    assert f"plaita executions retry {execution_id}" in answer["detail"], answer
    assert plaita.redis().xlen(plaita.stream) == stream_length
    assert plaita.json("dlq", "show", dlq_id)["replayed"] is None
    assert plaita.stop(worker) == 0, plaita.logs()


def _raw_start(plaita: Plaita, execution_id: str, flow_id: str) -> dict[str, str]:
    """A start carrier as the pool's producers write it (its generations stamped, W12), for
    a flow no process has registered yet."""
    from plaita.application.codec import encode_envelope
    from plaita.domain.envelope import TaskEnvelope
    from plaita.entrypoints.container import build_container

    generations = build_container(plaita.settings()).generations()
    envelope = TaskEnvelope.start(
        execution_id=execution_id,
        flow_id=flow_id,
        version="1",
        params={"n": 1, "plan": {}},
        now_ms=int(time.time() * 1000),
        generations=generations,
    )
    return encode_envelope(envelope)


def test_dead_letter_replays_once_and_only_once_and_stays_in_the_dlq(
    plaita: Plaita, tmp_path: Any
) -> None:
    """The flow a start needed was missing; once it is registered, one replay runs it."""
    worker = spawn_worker(plaita, "replayer", concurrency=1)
    execution_id = f"late-{uuid.uuid4().hex[:8]}"
    plaita.redis().xadd(plaita.stream, _raw_start(plaita, execution_id, "late_chain"))
    letters = poll(
        lambda: dead_letters(plaita),
        timeout=10,
        what=f"the start of the unknown flow in the DLQ\n{plaita.logs()}",
    )
    ((dlq_id, letter),) = letters
    assert "unknown_flow" in letter["reason"], letter
    document = json.loads((REPO_ROOT / FLOW_FILE).read_text())
    late = tmp_path / "late_chain.json"
    late.write_text(json.dumps({**document, "flow_id": "late_chain", "version": "1"}))
    plaita.run("flows", "register", str(late), "--handler-modules", HANDLER_MODULE)
    dlq_length = plaita.redis().xlen(plaita.dead_letters)

    first = plaita.json("dlq", "replay", dlq_id)
    assert first["outcome"] == "replayed", first
    assert first["execution_id"] == execution_id, first
    assert first["message_id"] in carriers_of(plaita, execution_id), first

    second = plaita.run("dlq", "replay", dlq_id, "--json", check=False)
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["outcome"] == "already_replayed", again
    assert again.get("message_id") is None, again

    # The entry is kept, and marked as replayed.
    assert plaita.redis().xlen(plaita.dead_letters) == dlq_length
    shown = plaita.json("dlq", "show", dlq_id)
    assert shown["replayed"] and shown["replayed"].get("execution_id") == execution_id, shown
    listed = plaita.json("dlq", "list")["items"]
    assert [entry["dlq_id"] for entry in listed] == [dlq_id], listed

    # The one replayed carrier runs the execution once, to its end.
    view = plaita.wait_for_statuses([execution_id], TERMINAL, timeout=20, alive=[worker])[
        execution_id
    ]
    assert view["status"] == "completed", (view, plaita.logs())
    assert run_counts(plaita, execution_id) == dict.fromkeys(NODES, 1)
    wait_until_no_pending(plaita)
    assert plaita.redis().xlen(plaita.dead_letters) == dlq_length
    assert worker.poll() is None, plaita.logs()
    assert plaita.stop(worker) == 0, plaita.logs()


def test_malformed_dead_letter_is_refused_for_replay_every_time_and_kept(
    plaita: Plaita,
) -> None:
    worker = spawn_worker(plaita, "sturdy", concurrency=1)
    raw = {"envelope": "{this is not json", "schema_version": "1"}
    message_id = plaita.redis().xadd(plaita.stream, raw)
    letters = poll(
        lambda: dead_letters(plaita),
        timeout=10,
        what=f"the malformed entry in the DLQ\n{plaita.logs()}",
    )
    ((dlq_id, letter),) = letters
    assert letter.get("message_id") == message_id and carries_raw_fields(letter, raw), letter

    # Nothing to rebuild a carrier from: refused by name, never marked replayed, kept.
    for _ in range(2):
        refused = plaita.run("dlq", "replay", dlq_id, "--json", check=False)
        assert refused.returncode != 0, refused.stdout
        assert "UnreadableDeadLetterError" in refused.stderr, refused.stderr
    shown = plaita.json("dlq", "show", dlq_id)
    assert shown["replayed"] is None, shown
    assert plaita.redis().xlen(plaita.dead_letters) == 1
    assert worker.poll() is None, plaita.logs()
    assert plaita.stop(worker) == 0, plaita.logs()
