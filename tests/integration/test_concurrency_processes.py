"""A concurrency limit held across real worker processes on a real Redis (E1a).

Thirty executions share one key with a limit of 2 and run on two ``plaita worker``
processes; one worker is killed with SIGKILL while it runs a handler (it holds a slot).
From the handlers' own start and end lines (``concurrency_handlers``), never more than two
ran at once, and every execution completes. Bounded: short lease timings, a 75 s budget.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Plaita, poll, requires_redis, share_fault_timings

pytestmark = [requires_redis, pytest.mark.process]

FLOWS = "tests/integration/concurrency_flows"
HANDLERS = "tests.integration.concurrency_handlers"
EXECUTIONS = 30
LIMIT = 2
STEP_SECONDS = 0.3


def worker(plaita: Plaita, consumer: str) -> subprocess.Popen[bytes]:
    return plaita.spawn(
        consumer,
        "worker",
        "--flows",
        FLOWS,
        "--handler-modules",
        HANDLERS,
        "--concurrency",
        "6",
        "--consumer-name",
        consumer,
        "--read-block-ms",
        "100",
    )


def start_all(plaita: Plaita, params: dict[str, Any], count: int) -> list[str]:
    """Start ``count`` executions from this process (a CLI process each would take seconds)."""
    from plaita.application.tenancy import tenant_scope
    from plaita.entrypoints.container import build_container

    async def start() -> list[str]:
        container = build_container(plaita.settings())
        try:
            use_case = container.start_execution()
            with tenant_scope("default"):
                return [
                    (await use_case("limited_work", params=params)).execution_id
                    for _ in range(count)
                ]
        finally:
            await container.redis_client().aclose()

    return asyncio.run(start())


def read_log(path: Path) -> list[tuple[str, str, int, int]]:
    if not path.exists():
        return []
    lines = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [(what, execution_id, int(pid), int(ns)) for what, execution_id, pid, ns in lines]


def most_at_once(events: list[tuple[str, str, int, int]], *, killed: int, killed_at_ns: int) -> int:
    """The most handlers running at one time; a handler the kill cut short ended then."""
    ends = {(e, pid) for what, e, pid, _ in events if what == "end"}
    timeline = [(ns, +1 if what == "start" else -1) for what, _, _, ns in events]
    timeline += [
        (killed_at_ns, -1)
        for what, execution_id, pid, _ in events
        if what == "start" and pid == killed and (execution_id, pid) not in ends
    ]
    running = peak = 0
    for _, change in sorted(timeline, key=lambda item: (item[0], item[1])):
        running += change
        peak = max(peak, running)
    return peak


def test_a_limit_of_two_holds_across_two_workers_and_a_kill_9(
    plaita: Plaita, tmp_path: Path
) -> None:
    began = time.monotonic()
    share_fault_timings(plaita)
    plaita.share(slot_sweep_interval_seconds=1)
    log = tmp_path / "handlers.log"
    plaita.run("flows", "register", f"{FLOWS}/limited_work.json", "--handler-modules", HANDLERS)
    victim = worker(plaita, "victim")
    survivor = worker(plaita, "survivor")
    params = {"customer": "acme", "log": str(log), "seconds": STEP_SECONDS}
    ids = start_all(plaita, params, EXECUTIONS)

    def victim_just_started_a_handler() -> bool:
        # Just started (within 100 ms): the 300 ms step surely still runs when the kill lands.
        events = read_log(log)
        ended = {(e, pid) for what, e, pid, _ in events if what == "end"}
        now_ns = time.monotonic_ns()
        return any(
            what == "start"
            and pid == victim.pid
            and (e, pid) not in ended
            and now_ns - ns < 100_000_000
            for what, e, pid, ns in events
        )

    poll(
        victim_just_started_a_handler,
        timeout=30,
        what=f"the victim to start a handler\n{plaita.logs()}",
    )
    os.kill(victim.pid, signal.SIGKILL)
    killed_at_ns = time.monotonic_ns()
    victim.wait(5)

    final = plaita.wait_for_statuses(
        ids,
        {"completed", "error", "cancelled"},
        timeout=max(5.0, 75 - (time.monotonic() - began)),
        alive=[survivor],
    )
    assert {view["status"] for view in final.values()} == {"completed"}, plaita.logs()
    events = read_log(log)
    assert {e for what, e, _, _ in events if what == "end"} == set(ids)
    peak = most_at_once(events, killed=victim.pid, killed_at_ns=killed_at_ns)
    assert peak <= LIMIT, f"{peak} handlers ran at once\n{plaita.logs()}"
    assert peak == LIMIT  # the limit was used, not only kept
    # The others waited their turn (in the workers' whole logs, not their tails).
    assert "event=slots.waiting" in plaita.log_of(victim) + plaita.log_of(survivor)
    cut_short = {e for what, e, pid, _ in events if what == "start" and pid == victim.pid} - {
        e for what, e, pid, _ in events if what == "end" and pid == victim.pid
    }
    assert cut_short, "the kill landed while the victim ran a handler"
    assert plaita.stop(survivor) == 0, plaita.logs()
