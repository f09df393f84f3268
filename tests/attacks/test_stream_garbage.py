"""Raw garbage on the task stream, read by real workers on a real Redis (R4, W2, W9).

What an outside attack wrote with ``XADD`` used to take workers down: one non-UTF-8 byte
made every read of its batch fail for ever (``worker.read_failed UnicodeDecodeError``),
stranding the good carriers read with it, and every later reclaim failed too, so a killed
worker's carriers were never recovered; a 10,000-deep envelope crash-looped in the
dead-letter guard. Now every garbage entry lands in the DLQ exactly once with its evidence
(its exact bytes, base64, when they are not UTF-8), the good carriers complete, and the
workers keep running.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
import uuid
from typing import Any

import pytest
import redis

from ..integration import fault_handlers
from ..integration.conftest import (
    FLOW_FILE,
    FLOW_ID,
    GROUP,
    HANDLER_MODULE,
    Plaita,
    poll,
    requires_redis,
)
from .conftest import spawn_worker, start_with_inputs

pytestmark = [requires_redis, pytest.mark.process]

#: Reclaims run every claim_min_idle / 2 = 0.75 s: this is several of them.
SEVERAL_RECLAIMS_SECONDS = 2.5


def garbage(now_ms: int) -> dict[str, dict[str, str | bytes]]:
    """The attack: entries no plaita producer writes, each refused for another reason."""

    def start(**document: Any) -> str:
        return json.dumps({"kind": "start", "flow_id": FLOW_ID, "timestamp_ms": now_ms, **document})

    return {
        "not UTF-8": {"envelope": b"\xff\xfe"},
        "10,000 levels deep": {"envelope": "[" * 10_000 + "]" * 10_000, "schema_version": "1"},
        "execution_id a number": {"envelope": start(execution_id=7), "schema_version": "1"},
        "params a string": {
            "envelope": start(execution_id=f"atk-{uuid.uuid4().hex}", params="n=1"),
            "schema_version": "1",
        },
        "missing fields": {"envelope": json.dumps({"kind": "start"}), "schema_version": "1"},
        "execution_id with a slash": {"envelope": start(execution_id="../../etc")},
    }


def add_garbage(plaita: Plaita) -> dict[str, tuple[str, dict[str, str | bytes]]]:
    """Write every garbage entry to the task stream; name → (message id, fields)."""
    written = {}
    for name, fields in garbage(int(time.time() * 1000)).items():
        message_id = plaita.redis().xadd(plaita.stream, fields)  # type: ignore[arg-type]
        written[name] = (message_id, fields)
    return written


def dead_letters(plaita: Plaita) -> list[dict[str, str]]:
    return [fields for _, fields in plaita.redis().xrange(plaita.dead_letters)]


def pending(raw_redis: redis.Redis, plaita: Plaita) -> set[str]:
    rows = raw_redis.xpending_range(plaita.stream, GROUP, min="-", max="+", count=10_000)
    return {row["message_id"].decode() for row in rows}


def assert_dead_lettered_once_with_evidence(
    plaita: Plaita, raw_redis: redis.Redis, written: dict[str, tuple[str, dict[str, Any]]]
) -> None:
    """Each garbage entry is in the DLQ exactly once, with its raw fields, and not pending."""
    poll(
        lambda: len(dead_letters(plaita)) >= len(written),
        timeout=20,
        what=f"every garbage entry in the DLQ\n{plaita.logs()}",
    )
    # Reclaims go on: none of them may dead-letter an entry a second time.
    time.sleep(SEVERAL_RECLAIMS_SECONDS)
    letters = dead_letters(plaita)
    assert len(letters) == len(written), letters
    for name, (message_id, fields) in written.items():
        (letter,) = [entry for entry in letters if entry["message_id"] == message_id] or [None]
        assert letter is not None, f"{name} ({message_id}) is not in the DLQ: {letters}"
        assert letter["reason"], (name, letter)
        if any(isinstance(value, bytes) for value in fields.values()):
            exact = [
                (base64.b64decode(key), base64.b64decode(value))
                for key, value in json.loads(letter["raw_base64"])
            ]
            assert exact == [(key.encode(), value) for key, value in fields.items()], letter
            assert "not UTF-8" in letter["reason"], letter
        else:
            assert json.loads(letter["raw"]) == fields, (name, letter)
    assert not {message_id for message_id, _ in written.values()} & pending(raw_redis, plaita)


def assert_never_failed_to_read(plaita: Plaita, process: subprocess.Popen[bytes]) -> None:
    log = plaita.log_of(process)
    for failure in ("worker.read_failed", "worker.dispatch_crashed", "RecursionError"):
        assert failure not in log, f"{failure} in the worker's log\n{log[-4000:]}"


def test_garbage_read_with_good_carriers_is_dead_lettered_once_and_they_complete(
    plaita: Plaita, raw_redis: redis.Redis
) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    # Written before any worker reads, so one read takes garbage and good carriers together.
    good = start_with_inputs(plaita, FLOW_ID, [{"n": n, "plan": {}} for n in range(2)])
    written = add_garbage(plaita)
    good += start_with_inputs(plaita, FLOW_ID, [{"n": n, "plan": {}} for n in range(2, 4)])

    worker = spawn_worker(plaita, "sturdy")

    final = plaita.wait_for_statuses(good, {"completed"}, timeout=30, alive=[worker])
    assert [final[execution_id]["result"]["n"] for execution_id in good] == [0, 1, 2, 3]
    assert_dead_lettered_once_with_evidence(plaita, raw_redis, written)
    # The operator sees the exact bytes of the non-UTF-8 entry.
    (not_utf8_letter,) = [
        dlq_id
        for dlq_id, fields in plaita.redis().xrange(plaita.dead_letters)
        if fields["message_id"] == written["not UTF-8"][0]
    ]
    shown = plaita.json("dlq", "show", not_utf8_letter)
    assert shown["raw_base64"] == [["ZW52ZWxvcGU=", "//4="]], shown
    assert shown["raw"] == {"envelope": "\\xff\\xfe"}, shown
    assert worker.poll() is None, plaita.logs()
    assert_never_failed_to_read(plaita, worker)
    assert plaita.stop(worker) == 0, plaita.logs()


def test_a_killed_workers_carriers_are_reclaimed_and_finished_while_garbage_is_pending(
    plaita: Plaita, raw_redis: redis.Redis
) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    # Garbage read by a worker that died before it dispatched anything: pending, on nobody
    # alive, so the next reclaim meets it in the same XAUTOCLAIM reply as the carriers below.
    written = add_garbage(plaita)
    raw_redis.xgroup_create(plaita.stream, GROUP, id="0", mkstream=True)
    raw_redis.xreadgroup(GROUP, "died-before-dispatch", {plaita.stream: ">"}, count=100)
    assert {message_id for message_id, _ in written.values()} <= pending(raw_redis, plaita)

    victim = spawn_worker(plaita, "victim")
    ids = start_with_inputs(
        plaita, FLOW_ID, [{"n": n, "plan": {"a": {"sleep": 2}}} for n in range(3)]
    )

    def victim_inside_node_a() -> bool:
        return all(
            plaita.redis().lrange(fault_handlers.pids_key(plaita.namespace, i, "a"), 0, -1)
            == [str(victim.pid)]
            for i in ids
        )

    poll(victim_inside_node_a, timeout=15, what=f"the victim inside node a\n{plaita.logs()}")
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(5)

    rescuer = spawn_worker(plaita, "rescuer")

    final = plaita.wait_for_statuses(ids, {"completed"}, timeout=40, alive=[rescuer])
    assert [final[execution_id]["result"]["n"] for execution_id in ids] == [0, 1, 2]
    for execution_id in ids:
        ran_by = plaita.redis().lrange(
            fault_handlers.pids_key(plaita.namespace, execution_id, "a"), 0, -1
        )
        assert ran_by == [str(victim.pid), str(rescuer.pid)], (execution_id, ran_by)
    assert_dead_lettered_once_with_evidence(plaita, raw_redis, written)
    assert rescuer.poll() is None, plaita.logs()
    assert_never_failed_to_read(plaita, rescuer)
    assert plaita.stop(rescuer) == 0, plaita.logs()
