"""Affinity with real ``plaita worker`` processes on a real Redis (W25).

Two workers, A and B, read one task stream. Executions started for B run every node on B
(the handlers record the pid that ran them; the history's ``started`` entry names B), those
A read first are passed on to B; once B is killed (``kill -9``), a start for B loses its
target and runs on A within a bounded time — at once when B's registry record has lapsed,
within the hand-over budget while it still says ``running``.

Timings are the fault suites' (lease TTL 3 s, so a registry record lapses 3 s after its
worker's last heartbeat); every wait is a bounded poll, every process is stopped by pid.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from typing import Any

import pytest

from . import fault_handlers
from .conftest import (
    FLOW_ID,
    NODES,
    TERMINAL,
    Plaita,
    poll,
    requires_redis,
    share_fault_timings,
    worker_args,
)

pytestmark = [requires_redis, pytest.mark.process]

#: Enough for two workers that read in turn: no start of this test is stripped for its count.
BUDGET = 64
BURST = 16


@pytest.fixture(autouse=True)
def pool(plaita: Plaita) -> None:
    share_fault_timings(plaita)
    plaita.share(affinity_max_handovers=BUDGET)


def spawn_worker(plaita: Plaita, name: str) -> tuple[Any, str]:
    consumer = f"{name}-{uuid.uuid4().hex[:8]}"
    process = plaita.spawn(name, *worker_args(consumer, concurrency=4))
    return process, consumer


def registered(plaita: Plaita) -> dict[str, str]:
    """Instance id → status, as ``plaita workers list`` shows the registry."""
    items = plaita.json("workers", "list")["items"]
    return {item["instance_id"]: item["status"] for item in items}


def start_for(plaita: Plaita, target: str, count: int) -> list[str]:
    """``count`` starts of the fault chain for ``target``, from this process, one after the
    other (the use case ``plaita executions start`` runs)."""
    from plaita.application.tenancy import tenant_scope
    from plaita.entrypoints.container import build_container

    async def start_all() -> list[str]:
        container = build_container(plaita.settings())
        try:
            start = container.start_execution()
            with tenant_scope("default"):
                return [
                    (
                        await start(FLOW_ID, params={"n": n, "plan": {}}, target_instance_id=target)
                    ).execution_id
                    for n in range(count)
                ]
        finally:
            await container.redis_client().aclose()

    return asyncio.run(start_all())


def history(plaita: Plaita, execution_id: str) -> list[dict[str, Any]]:
    out = plaita.run("executions", "history", execution_id, "--json").stdout
    return [json.loads(line) for line in out.splitlines()[1:]]


def pids(plaita: Plaita, execution_id: str) -> dict[str, list[int]]:
    client = plaita.redis()
    return {
        node: [
            int(pid)
            for pid in client.lrange(
                fault_handlers.pids_key(plaita.namespace, execution_id, node), 0, -1
            )
        ]
        for node in NODES
    }


def test_starts_for_b_run_on_b_and_after_b_is_killed_on_a(plaita: Plaita) -> None:
    a, a_id = spawn_worker(plaita, "worker-a")
    b, b_id = spawn_worker(plaita, "worker-b")
    poll(
        lambda: registered(plaita).get(a_id) == registered(plaita).get(b_id) == "running",
        timeout=20,
        interval=0.2,
        what=f"both workers running in the registry\n{plaita.logs()}",
    )

    # Through the command line once, then a burst from this process.
    first = json.loads(
        plaita.run(
            "executions",
            "start",
            FLOW_ID,
            "--input",
            json.dumps({"n": -1, "plan": {}}),
            "--target-instance",
            b_id,
            "--json",
        ).stdout
    )["execution_id"]
    ids = [first, *start_for(plaita, b_id, BURST)]
    views = plaita.wait_for_statuses(ids, TERMINAL, timeout=60, alive=[a, b])

    assert {view["status"] for view in views.values()} == {"completed"}
    handed_over = 0
    for execution_id in ids:
        assert pids(plaita, execution_id) == {node: [b.pid] for node in NODES}, execution_id
        entries = history(plaita, execution_id)
        [started] = [e for e in entries if e["kind"] == "started"]
        assert started["worker"] == b_id
        assert not [e for e in entries if e["kind"] == "target_stripped"], entries
        passes = [e for e in entries if e["kind"] == "handed_over"]
        assert all(e["worker"] == a_id and e["detail"]["target"] == b_id for e in passes)
        handed_over += bool(passes)
    # Each start goes to whichever worker reads first; across the burst A read some first.
    assert handed_over >= 1, "worker-a never took a carrier for worker-b"

    # kill -9: no drain, no stopped record; the record says running until it lapses.
    os.kill(b.pid, signal.SIGKILL)
    b.wait(10)
    started_at = time.monotonic()
    [soon] = start_for(plaita, b_id, 1)
    plaita.wait_for_statuses([soon], {"completed"}, timeout=30, alive=[a])
    assert pids(plaita, soon) == {node: [a.pid] for node in NODES}
    [stripped] = [e for e in history(plaita, soon) if e["kind"] == "target_stripped"]
    assert stripped["detail"]["reason"] in {
        "target_absent",
        "target_heartbeat_lapsed",
        "handovers_exhausted",
    }

    poll(
        lambda: b_id not in registered(plaita),
        timeout=20,
        interval=0.2,
        what="worker-b's registry record to lapse",
    )
    [late] = start_for(plaita, b_id, 1)
    plaita.wait_for_statuses([late], {"completed"}, timeout=30, alive=[a])
    assert time.monotonic() - started_at < 60
    assert pids(plaita, late) == {node: [a.pid] for node in NODES}
    entries = history(plaita, late)
    [stripped] = [e for e in entries if e["kind"] == "target_stripped"]
    assert (stripped["worker"], stripped["detail"]["reason"]) == (a_id, "target_absent")
    assert not [e for e in entries if e["kind"] == "handed_over"], "stripped at once"
    [started] = [e for e in entries if e["kind"] == "started"]
    assert started["worker"] == a_id
    assert f"event=affinity.target_stripped execution_id={late}" in plaita.log_of(a)
