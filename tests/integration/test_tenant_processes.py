"""Tenant lifecycle against a real ``plaita worker`` process on real Redis (W24, I0).

A deployment of epoch 7 (``PLAITA_DEPLOYMENT_EPOCH`` shared by the worker and the CLI).
Tenant acme is suspended; its starts are accepted and held: no handler runs (the handlers'
own run counters stay at zero) and the executions stay pending, their carriers parked,
until ``plaita tenants resume acme`` — then every one completes. Tenant globex has no status
written under the deployment's epoch: its carrier is held (left pending, a WARNING in the
worker's log names the fix) until ``plaita tenants resume globex`` writes one; a default
tenant's execution runs meanwhile (it fails open).
"""

from __future__ import annotations

import json
import time

import pytest

from .conftest import (
    FLOW_ID,
    NODES,
    Plaita,
    poll,
    requires_redis,
    share_fault_timings,
    worker_args,
)
from .fault_handlers import runs_key

pytestmark = [requires_redis, pytest.mark.process]

EPOCH = 7
COUNT = 5
INPUT = json.dumps({"n": 1, "plan": {}})


def start(plaita: Plaita, tenant: str) -> str:
    started = plaita.json("executions", "start", FLOW_ID, "--tenant", tenant, "--input", INPUT)
    execution_id: str = started["execution_id"]
    return execution_id


def handler_runs(plaita: Plaita, execution_ids: list[str]) -> int:
    client = plaita.redis()
    return sum(
        int(client.get(runs_key(plaita.namespace, execution_id, node)) or 0)
        for execution_id in execution_ids
        for node in NODES
    )


def test_a_suspended_tenant_makes_no_step_until_resumed(plaita: Plaita) -> None:
    share_fault_timings(plaita)
    plaita.share(deployment_epoch=EPOCH)
    worker = plaita.spawn("worker", *worker_args("w1", concurrency=4))

    suspended = plaita.json("tenants", "suspend", "acme")
    assert (suspended["status"], suspended["epoch"]) == ("suspended", EPOCH)

    # The worker registers the flows it is given at start-up: a start waits for them.
    poll(
        lambda: plaita.run("flows", "show", FLOW_ID, check=False).returncode == 0,
        timeout=30,
        what=f"the worker's flows\n{plaita.logs()}",
    )
    held = [start(plaita, "acme") for _ in range(COUNT)]
    poll(
        lambda: plaita.json("tenants", "show", "acme")["parked"] == COUNT,
        timeout=30,
        what=f"{COUNT} parked carriers\n{plaita.logs()}",
    )
    time.sleep(1.0)  # a worker that ignored the suspension would have run a step by now
    assert handler_runs(plaita, held) == 0, plaita.logs()
    for execution_id in held:
        view = plaita.json("executions", "show", execution_id, "--tenant", "acme")
        assert view["status"] == "pending", view
        # What an operator reads: why it waits, and what frees it.
        assert view["held_back"]["reason"] == "tenant_suspended", view
        assert "plaita tenants resume acme" in view["held_back"]["detail"]

    # No status under the deployment's epoch: held, with a WARNING naming the fix.
    stale = start(plaita, "globex")
    poll(
        lambda: "event=tenant.status_stale" in plaita.log_of(worker),
        timeout=30,
        what=f"the stale status WARNING\n{plaita.logs()}",
    )
    assert "plaita tenants resume globex" in plaita.log_of(worker)
    # The default tenant fails open.
    default = start(plaita, "default")
    plaita.wait_for_status(default, {"completed"})
    assert handler_runs(plaita, [stale]) == 0, plaita.logs()

    resumed = plaita.json("tenants", "resume", "acme")
    assert (resumed["outcome"], resumed["requeued"], resumed["parked"]) == ("resumed", COUNT, 0)
    for execution_id in held:
        done = plaita.wait_for_status(execution_id, {"completed", "error"}, tenant="acme")
        assert done["status"] == "completed", plaita.logs()
    assert handler_runs(plaita, held) == COUNT * len(NODES)
    shown = plaita.json("executions", "show", held[0], "--tenant", "acme")
    assert shown["held_back"] is None, shown

    written = plaita.json("tenants", "resume", "globex")
    assert (written["outcome"], written["epoch"]) == ("resumed", EPOCH)
    # The held carrier stayed pending; the worker reclaims it and now runs it.
    done = plaita.wait_for_status(stale, {"completed", "error"}, tenant="globex")
    assert done["status"] == "completed", plaita.logs()

    assert plaita.stop(worker) == 0, plaita.logs()
