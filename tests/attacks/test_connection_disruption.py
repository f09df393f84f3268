"""Connections killed and paused while executions suspend: every execution completes (W3, R3).

The campaign's harness: ``CLIENT KILL TYPE normal`` and ``CLIENT PAUSE`` issued again and
again against the Redis two workers use, while 45 executions run task → sleep → task. Before
the fix, redis-py's asyncio client sometimes turned the watchdog's cancellation into a
``ConnectionError`` or a normal return; the watchdog then renewed a suspended execution's
lease for ever, and its timer carrier was skipped as "lease is live" at every redelivery.
Now the watchdog's life is bounded by its dispatch, a lease this very worker holds without a
dispatch is never taken for a live holder, and a failed release leaves the carrier pending.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from ..integration.conftest import Plaita
from .conftest import spawn_worker

pytestmark = [pytest.mark.process]

FLOW_FILE = "tests/attacks/flows/task_sleep_task.json"
EXECUTIONS = 45
ROUNDS = 2


class Disruptor:
    """Kills every normal connection, then pauses all clients, in turns, until stopped."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=5)
        self._stop = threading.Event()
        self.kills = 0
        self.pauses = 0
        self._thread = threading.Thread(target=self._run, name="disruptor", daemon=True)

    def __enter__(self) -> Disruptor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.close()

    def _run(self) -> None:
        turn = 0
        while not self._stop.wait(0.15):
            turn += 1
            try:
                if turn % 2:
                    self._client.execute_command(
                        "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"
                    )
                    self.kills += 1
                else:
                    self._client.execute_command("CLIENT", "PAUSE", "120")
                    self.pauses += 1
            except redis.RedisError:
                continue


@pytest.mark.parametrize("round_number", range(1, ROUNDS + 1))
def test_every_execution_completes_while_connections_are_killed_and_paused_during_suspends(
    private_plaita: Plaita, round_number: int
) -> None:
    plaita = private_plaita
    plaita.run(
        "flows", "register", FLOW_FILE, "--handler-modules", "tests.integration.fault_handlers"
    )
    for name in ("worker-a", "worker-b"):
        spawn_worker(plaita, name)
    workers = [process for process, _ in plaita.processes]
    execution_ids = plaita.start_executions("task_sleep_task", EXECUTIONS)
    started = time.monotonic()

    with Disruptor(plaita.redis_url) as disruptor:
        time.sleep(6)  # the suspends, the timers and the resumes all happen under fire

    assert disruptor.kills and disruptor.pauses
    final = plaita.wait_for_statuses(
        execution_ids, {"completed", "error", "cancelled"}, timeout=90, alive=workers
    )
    statuses = {execution_id: view["status"] for execution_id, view in final.items()}
    assert set(statuses.values()) == {"completed"}, (statuses, plaita.logs())
    assert time.monotonic() - started < 120
