"""Documents nested too deep, against real processes on a real Redis (R4, W9).

A 10,000-deep envelope on the stream used to crash-loop: the dead-letter guard re-parsed it,
``RecursionError`` escaped, the carrier stayed pending and every reclaim crashed again, so it
never reached the DLQ. A 300-deep input was accepted at the door and then dead-lettered by
the worker ("recursion limit"), so its execution never existed. Now the door and the worker
apply one limit: the door refuses what the worker would, and the worker dead-letters, once,
what no door of plaita would have let in.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ..integration.conftest import (
    FLOW_FILE,
    FLOW_ID,
    HANDLER_MODULE,
    Plaita,
    poll,
    requires_redis,
)
from .conftest import spawn_worker

pytestmark = [requires_redis, pytest.mark.process]


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def test_a_ten_thousand_deep_envelope_reaches_the_dlq_once_and_the_worker_keeps_running(
    plaita: Plaita,
) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    worker = spawn_worker(plaita, "sturdy")
    fields = {"envelope": "[" * 10_000 + "]" * 10_000, "schema_version": "1"}
    message_id = plaita.redis().xadd(plaita.stream, fields)  # type: ignore[arg-type]

    letters = poll(
        lambda: plaita.redis().xrange(plaita.dead_letters),
        timeout=15,
        what=f"the deep envelope in the DLQ\n{plaita.logs()}",
    )
    time.sleep(2.5)  # several reclaims later, still one dead letter
    ((_, letter),) = plaita.redis().xrange(plaita.dead_letters) or letters
    assert letter["message_id"] == message_id, letter
    assert "task envelope depth limit" in letter["reason"], letter
    assert json.loads(letter["raw"]) == fields
    assert plaita.redis().xpending(plaita.stream, "plaita-workers")["pending"] == 0
    # The operator can list and show it.
    (listed,) = plaita.json("dlq", "list")["items"]
    assert listed["message_id"] == message_id and listed["execution_id"] is None, listed

    log = plaita.log_of(worker)
    assert "RecursionError" not in log and "worker.dispatch_crashed" not in log, log[-4000:]
    assert worker.poll() is None, plaita.logs()
    assert plaita.stop(worker) == 0, plaita.logs()


def test_an_input_the_worker_would_refuse_is_refused_at_the_door_and_one_at_the_limit_runs(
    plaita: Plaita,
) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    worker = spawn_worker(plaita, "sturdy")

    refused = plaita.run(
        "executions",
        "start",
        FLOW_ID,
        "--input",
        json.dumps({"n": 1, "plan": {}, "deep": nested(300)}),
        check=False,
    )
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert "execution input depth limit" in refused.stderr, refused.stderr
    assert plaita.redis().xlen(plaita.stream) == 0

    # The deepest input the door accepts (the input object itself is the first level).
    at_the_limit = {"n": 2, "plan": {}, "deep": nested(63)}
    started = plaita.json("executions", "start", FLOW_ID, "--input", json.dumps(at_the_limit))
    execution_id = started["execution_id"]
    final = plaita.wait_for_statuses([execution_id], {"completed"}, timeout=20, alive=[worker])
    assert final[execution_id]["input"] == at_the_limit
    assert plaita.redis().xlen(plaita.dead_letters) == 0
    assert plaita.stop(worker) == 0, plaita.logs()
