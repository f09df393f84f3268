"""Operator controls against real worker and event-filter processes on real Redis (W23).

Pause an execution suspended on an event and publish its event: it does not advance (its
event carrier is parked); unpause: it completes. Cancel a suspended execution: a worker ends
it as cancelled under the lease. Retry a failed execution from a chosen node: it completes
under the same id, and the nodes before that one do not run again.
"""

from __future__ import annotations

import time

import pytest

from .conftest import FLOW_ID, HANDLER_MODULE, Plaita, poll, requires_redis
from .fault_handlers import runs_key

pytestmark = [requires_redis, pytest.mark.process]


def parked_count(plaita: Plaita, execution_id: str) -> int:
    return int(plaita.redis().hlen(plaita.key(f"x:{{{execution_id}}}:parked")))


def test_pause_unpause_cancel_and_retry_from_a_node_on_real_processes(plaita: Plaita) -> None:
    # One retry of a node, then the execution ends in error: the retry test's failure.
    plaita.share(default_retries=1)
    worker = plaita.spawn(
        "worker",
        "worker",
        "--flows",
        "tests/integration/flows",
        "--handler-modules",
        f"{HANDLER_MODULE},examples.handlers",
        "--read-block-ms",
        "100",
        "--concurrency",
        "4",
    )
    event_filter = plaita.spawn("event-filter", "event-filter", "--read-block-ms", "100")
    plaita.json(
        "flows",
        "register",
        "examples/flows/approval.json",
        "--handler-modules",
        "examples.handlers",
    )

    # --- pause: the published decision is parked, the execution stays where it waits ------
    paused = plaita.json("executions", "start", "approval", "--input", '{"amount": 5000}')
    paused_id = paused["execution_id"]
    plaita.wait_for_status(paused_id, {"suspended"})
    assert plaita.json("executions", "pause", paused_id)["paused"] is True
    plaita.run(
        "events",
        "publish",
        "approval_decision",
        "--correlation-id",
        paused_id,
        "--data",
        '{"approved": true}',
    )
    poll(lambda: parked_count(plaita, paused_id) == 1, timeout=20, what="the parked event carrier")
    time.sleep(0.5)  # a worker that ignored the pause would have advanced it by now
    view = plaita.wait_for_status(paused_id, {"suspended"}, timeout=5)
    assert "record_decision" not in view["node_results"], plaita.logs()
    listed = plaita.json("executions", "list", "--flow", "approval", "--status", "suspended")
    # One parked carrier per resume of the event: the filter's, and on a slow machine a
    # reconcile round's duplicate too (it replays an event whose wait is still registered;
    # the worker drops the duplicate once the first resumed it).
    [(listed_id, listed_paused, parked)] = [
        (i["execution_id"], i["paused"], i["parked"]) for i in listed["items"]
    ]
    assert (listed_id, listed_paused) == (paused_id, True)
    assert parked in (1, 2), plaita.logs()

    unpaused = plaita.json("executions", "unpause", paused_id)
    assert (unpaused["outcome"], unpaused["requeued"]) == ("unpaused", parked)
    done = plaita.wait_for_status(paused_id, {"completed", "error", "cancelled"})
    assert (done["status"], done["result"]["outcome"]) == ("completed", "shipped"), plaita.logs()
    assert parked_count(plaita, paused_id) == 0

    # --- cancel: flag first, then the worker terminalises it under the lease --------------
    doomed = plaita.json("executions", "start", "approval", "--input", '{"amount": 6000}')
    doomed_id = doomed["execution_id"]
    plaita.wait_for_status(doomed_id, {"suspended"})
    assert plaita.json("executions", "cancel", doomed_id)["cancel_requested"] is True
    cancelled = plaita.wait_for_status(doomed_id, {"cancelled", "completed", "error"})
    assert cancelled["status"] == "cancelled", plaita.logs()
    assert cancelled["error"]["node_id"] == "wait_decision"

    # --- retry from a chosen node: same id, earlier nodes not run again -------------------
    plan = '{"n": 7, "plan": {"b": {"fail": "transient", "times": 2}}}'
    failing = plaita.json(
        "executions", "start", FLOW_ID, "--input", plan, "--execution-id", "retry-me"
    )
    failed = plaita.wait_for_status(failing["execution_id"], {"error", "completed"})
    assert (failed["status"], failed["error"]["node_id"]) == ("error", "b"), plaita.logs()

    code = plaita.run("executions", "retry", "retry-me", "--from-node", "nope", check=False)
    assert code.returncode == 1 and "UnknownNodeError" in code.stderr

    retried = plaita.json("executions", "retry", "retry-me", "--from-node", "b")
    assert (retried["outcome"], retried["node_id"]) == ("restarted", "b")
    completed = plaita.wait_for_status("retry-me", {"completed", "error"})
    assert completed["status"] == "completed", plaita.logs()
    assert completed["result"]["nodes"] == ["a", "b", "c", "d"]
    client = plaita.redis()
    runs = {
        node: int(client.get(runs_key(plaita.namespace, "retry-me", node)) or 0) for node in "abcd"
    }
    assert runs == {"a": 1, "b": 3, "c": 1, "d": 1}

    assert plaita.stop(worker) == 0, plaita.logs()
    assert plaita.stop(event_filter) == 0, plaita.logs()
