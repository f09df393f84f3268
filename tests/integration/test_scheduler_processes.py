"""Two ``plaita scheduler`` replicas on real Redis, one killed with SIGKILL mid-way (W22).

A per-second schedule; two replicas claim its dues (2 s claims, 0.2 s polls). One is killed
after it started executions. A kill between ticks leaves nothing behind; the worst kill —
after a due's claim and start, before its record — is made certain rather than left to
chance: right after the SIGKILL the test leaves what that kill leaves, for a due two seconds
ahead: the dead replica's live claim, and the execution its start enqueued under the due's
key. The other replica goes on: that due waits out the claim, is fired late (still on time),
and its dedup key finds the dead replica's execution. Afterwards every due of the window
started exactly one execution, under ``sched:tick:due:<due_ms>``, and none is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

from plaita.application.tenancy import tenant_scope
from plaita.domain.schedules import cron_dedup_key
from plaita.entrypoints.container import build_container

from .conftest import Plaita, poll, requires_redis

QUICK = {
    "flow_id": "quick",
    "version": "1",
    "start": "done",
    "nodes": [{"id": "done", "type": "end"}],
}
CLAIM_TTL_SECONDS = 2.0


def schedule_state(plaita: Plaita) -> dict[str, str]:
    fields: dict[str, str] = plaita.redis().hgetall(plaita.key("sched:{tick}"))  # type: ignore[assignment]
    return fields


def leave_a_killed_fire_behind(plaita: Plaita, due_ms: int) -> str:
    """What a replica killed between a due's start and its record leaves: its live claim
    of the due, and the execution it started under the due's key."""
    claim = plaita.key(f"sched:{{tick}}:claim:{due_ms}")
    assert plaita.redis().set(claim, "replica-a", nx=True, px=int(CLAIM_TTL_SECONDS * 1000))

    async def start() -> str:
        container = build_container(plaita.settings())
        try:
            with tenant_scope("default"):
                started = await container.start_execution()(
                    "quick", dedup_key=cron_dedup_key("tick", due_ms)
                )
            return started.execution_id
        finally:
            await container.redis_client().aclose()

    return asyncio.run(start())


def started_keys(plaita: Plaita) -> Counter[str]:
    """How many executions exist per dedup key (read through plaita's own repository)."""

    async def read() -> Counter[str]:
        container = build_container(plaita.settings())
        try:
            with tenant_scope("default"):
                states = await container.executions().list(flow_id="quick", limit=10_000)
            return Counter(str(state.dedup_key) for state in states)
        finally:
            await container.redis_client().aclose()

    return asyncio.run(read())


@requires_redis
def test_two_replicas_and_a_kill_9_start_each_due_once_and_miss_none(
    plaita: Plaita, tmp_path: Path
) -> None:
    plaita.share(scheduler_claim_ttl_seconds=CLAIM_TTL_SECONDS, scheduler_poll_interval_seconds=0.2)
    flow = tmp_path / "quick.json"
    flow.write_text(json.dumps(QUICK))
    plaita.run("flows", "register", str(flow), "--shared")
    plaita.run("schedules", "create", "tick", "--flow", "quick", "--cron", "* * * * * *")
    victim = plaita.spawn("scheduler-a", "scheduler", "--consumer-name", "replica-a")
    survivor = plaita.spawn("scheduler-b", "scheduler", "--consumer-name", "replica-b")

    # Kill the victim once it has started something: it may hold a claim it never records.
    poll(
        lambda: (
            "event=schedule.fired" in plaita.log_of(victim)
            and int(schedule_state(plaita).get("fired", 0)) >= 3
        ),
        timeout=15,
        what="both replicas up and the victim firing",
    )
    os.kill(victim.pid, signal.SIGKILL)
    killed_ms = int(time.time() * 1000)
    victim.wait(5)
    held_due = (killed_ms // 1000 + 2) * 1000
    orphan = leave_a_killed_fire_behind(plaita, held_due)

    # The survivor carries on past the dead replica's claims.
    poll(
        lambda: (
            int(schedule_state(plaita)["cursor"])
            >= killed_ms + 3000 + int(CLAIM_TTL_SECONDS * 1000)
        ),
        timeout=15,
        what="the survivor firing past the dead replica's claims",
    )
    assert plaita.stop(survivor) == 0, plaita.logs()
    assert "event=scheduler.stopped holder=replica-b" in plaita.log_of(survivor)

    state = schedule_state(plaita)
    counts = started_keys(plaita)
    dues = sorted(int(key.rsplit(":", 1)[1]) for key in counts)
    expected = list(range(dues[0], int(state["cursor"]) + 1, 1000))
    assert all(key.startswith("sched:tick:due:") for key in counts), counts
    assert dues == expected, f"missing dues: {sorted(set(expected) - set(dues))}"
    assert set(counts.values()) == {1}, {k: n for k, n in counts.items() if n != 1}
    assert int(state["fired"]) == len(dues) and int(state.get("skipped", 0)) == 0
    assert dues[-1] > killed_ms + 3000
    # From the first due after the schedule was created: none before the replicas started
    # was lost either (they were on time when the first tick came).
    created_ms = json.loads(state["definition"])["created_at_ms"]
    assert dues[0] == (created_ms // 1000 + 1) * 1000
    # The dead replica's due: fired by the survivor once the claim expired, into the
    # execution the dead one had started.
    refire = [
        line
        for line in plaita.log_of(survivor).splitlines()
        if f"event=schedule.fired schedule_id=tick tenant_id=default due_ms={held_due} " in line
    ]
    assert len(refire) == 1 and f"execution_id={orphan} deduplicated=True" in refire[0], refire
