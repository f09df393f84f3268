"""A mixed pool on one queue never runs a carrier under another pool's rules (W12).

Real ``plaita`` processes on real Redis. Pool A and pool B share the task stream and consumer
group but not their settings: B has another budget (lease TTL) or another family (DLQ key).
A carrier written by A's CLI is read by a B worker, which leaves it pending and says why
(``event=config.budget_stale`` / ``event=config.family_mismatch``); an A worker then reclaims
and completes it. Nothing of it runs on B, and nothing reaches a DLQ.

And the converse: every process of one pool (CLI, console, event filter, worker) started
with the same ``PLAITA_*`` environment computes the same generations, so nothing a producer
writes is ever left pending by the pool's own workers.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..integration.conftest import (
    FLOW_FILE,
    FLOW_ID,
    HANDLER_MODULE,
    Plaita,
    isolated_plaita,
    poll,
    requires_redis,
)
from ..integration.fault_handlers import pids_key, runs_key

pytestmark = [requires_redis, pytest.mark.process]


@pytest.fixture
def plaita(tmp_path: Path) -> Iterator[Plaita]:
    with isolated_plaita(tmp_path) as runner:
        yield runner


#: Pool A's settings, shared by its CLI and its workers through the environment.
POOL_A = {"lease_ttl_seconds": 3, "claim_min_idle_ms": 1500}
#: How long B is watched holding the carrier before A starts.
WATCH_SECONDS = 2.0


def spawn_worker(
    plaita: Plaita, name: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    process = plaita.spawn(
        name,
        "worker",
        "--flows",
        "tests/integration/flows",
        "--handler-modules",
        HANDLER_MODULE,
        "--read-block-ms",
        "100",
        "--concurrency",
        "2",
        "--consumer-name",
        f"{name}-{uuid.uuid4().hex[:8]}",
        env=env,
    )
    poll(
        lambda: process.poll() is not None or "event=worker.started" in plaita.log_of(process),
        timeout=15,
        what=f"worker {name} to start",
    )
    assert process.poll() is None, plaita.logs()
    return process


def effective(plaita: Plaita, process: subprocess.Popen[bytes]) -> dict[str, str]:
    """The generations a process logged at start-up (``event=config.effective``)."""
    line = poll(
        lambda: next(
            (ln for ln in plaita.log_of(process).splitlines() if "event=config.effective" in ln),
            None,
        ),
        timeout=15,
        what="event=config.effective",
    )
    return dict(re.findall(r"(config_family|config_generation|budget_generation)=(\S+)", line))


def stamps(plaita: Plaita, stream: str) -> list[dict[str, str]]:
    """The generations on every carrier of ``stream``, in order."""
    found = []
    for _, fields in plaita.redis().xrange(stream):
        document = json.loads(fields["envelope"])
        found.append({name: document[name] for name in effective_names()})
    return found


def effective_names() -> tuple[str, str, str]:
    return ("config_family", "config_generation", "budget_generation")


@pytest.mark.parametrize(
    ("pool_b", "event"),
    [
        ({"PLAITA_LEASE_TTL_SECONDS": "6"}, "config.budget_stale"),
        ({"PLAITA_DLQ_KEY": "{ns}:{{default}}:other-dlq"}, "config.family_mismatch"),
    ],
    ids=["budget", "family"],
)
def test_a_carrier_of_pool_a_is_left_pending_by_pool_b_and_completed_by_pool_a(
    plaita: Plaita, pool_b: dict[str, str], event: str
) -> None:
    """W12: B leaves A's carrier pending with the named event; an A worker completes it."""
    plaita.share(**POOL_A)
    pool_b = {name: value.format(ns=plaita.namespace) for name, value in pool_b.items()}
    # B reclaims nothing during the test (claim idle 60 s): the carrier it read stays its own
    # pending entry until an A worker reclaims it.
    b = spawn_worker(plaita, "pool-b", env={**pool_b, "PLAITA_CLAIM_MIN_IDLE_MS": "60000"})
    started = plaita.json("executions", "start", FLOW_ID, "--input", '{"n": 1, "plan": {}}')
    execution_id = started["execution_id"]

    noticed = poll(
        lambda: [ln for ln in plaita.log_of(b).splitlines() if f"event={event} " in ln],
        timeout=15,
        what=f"event={event} in pool B's log",
    )
    time.sleep(WATCH_SECONDS)
    assert execution_id in noticed[0] and "WARNING" in noticed[0], noticed
    # B ran nothing: the execution is as its start left it, accepted and not picked up.
    view = plaita.states([execution_id])[execution_id]
    assert view is not None and view["status"] == "pending", view
    assert view["steps"] == 0 and view["last_node_id"] is None, view
    pending = plaita.redis().xpending(plaita.stream, "plaita-workers")
    assert pending["pending"] == 1, pending

    a = spawn_worker(plaita, "pool-a")
    finished = plaita.wait_for_statuses([execution_id], {"completed"}, timeout=30, alive=[a, b])

    assert finished[execution_id]["status"] == "completed"
    client = plaita.redis()
    for node in ("a", "b", "c", "d"):
        assert client.get(runs_key(plaita.namespace, execution_id, node)) == "1"
        assert client.lrange(pids_key(plaita.namespace, execution_id, node), 0, -1) == [
            str(a.pid)
        ], f"node {node} ran on pool B\n{plaita.logs()}"
    assert client.xlen(plaita.dead_letters) == 0
    assert not client.exists(plaita.key("{default}:other-dlq"))
    assert plaita.stop(a) == 0 and plaita.stop(b) == 0, plaita.logs()


def test_every_process_of_one_pool_computes_the_workers_generations(plaita: Plaita) -> None:
    """W12: CLI, console, event filter and worker with one environment stamp one set of
    generations — a producer that disagreed would have its carriers left pending by every
    worker of its own pool."""
    token = uuid.uuid4().hex
    plaita.share(
        queue_name="orders",
        consumer_group="order-workers",
        lease_ttl_seconds=7,
        claim_min_idle_ms=9000,
        max_deliveries=4,
        max_carrier_age_days=3,
        handler_modules=HANDLER_MODULE,
        console_tokens=json.dumps(
            [{"token": token, "name": "ops", "role": "admin", "tenants": ["*"]}]
        ),
    )
    stream = plaita.key("q:{orders}:stream")
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    plaita.json("executions", "start", FLOW_ID, "--input", '{"n": 1, "plan": {}}')

    console = plaita.spawn("console", "console", "--port", "0")
    url = poll(
        lambda: re.search(r"listening on (http://\S+)", plaita.log_of(console)),
        timeout=15,
        what="the console to listen",
    ).group(1)
    request = urllib.request.Request(
        f"{url}/api/v1/executions",
        data=json.dumps({"flow_id": FLOW_ID, "input": {"n": 2, "plan": {}}}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    written = stamps(plaita, stream)
    event_filter = plaita.spawn("event-filter", "event-filter", "--read-block-ms", "100")
    worker = spawn_worker(plaita, "worker")

    ours = effective(plaita, worker)
    assert set(ours) == set(effective_names()), ours
    assert effective(plaita, console) == ours
    assert effective(plaita, event_filter) == ours
    assert written == [ours, ours], "the CLI's and the console's start carriers"
    assert plaita.stop(worker) == 0, plaita.logs()
