"""A Redis outage under a running worker: one WARNING, no traceback, one INFO, nothing lost.

The issue: while Redis was down, the timer mover logged an ERROR with a full traceback about
ten times a second per worker. Now every background loop backs off, the outage is announced
once (``event=store.unreachable``) and its end once (``event=store.recovered``, with the count
of failed attempts and the duration), and the timer that fell due meanwhile still fires.

The outage is real: a private ``redis-server`` (append-only file, so it comes back with its
data) on a free port is stopped while the worker waits on a timer and started again after the
timer fell due. Stopping the shared test Redis would disturb every other test run.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ..integration.conftest import HANDLER_MODULE, TERMINAL, Plaita, poll, requires_redis

pytestmark = [
    requires_redis,
    pytest.mark.process,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

#: How long the execution sleeps: the outage begins well before its timer is due.
SLEEP_MS = 5_000
#: Long enough for every background loop to fail several times, and past the timer's due time.
OUTAGE_SECONDS = 6.0
NAP = {
    "flow_id": "outage_nap",
    "version": "1",
    "start": "nap",
    "nodes": [
        {"id": "nap", "type": "sleep", "duration": SLEEP_MS, "next": "after"},
        {"id": "after", "type": "task", "handler": f"{HANDLER_MODULE}:step", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


class PrivateRedis:
    """A ``redis-server`` of this test alone; stopped and started by its pid."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.directory / "redis-server.log").open("ab")
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        client = redis.Redis.from_url(self.url)
        try:
            poll(self._answers(client), timeout=10, what=f"redis-server on port {self.port}")
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    @staticmethod
    def _answers(client: redis.Redis) -> object:
        def check() -> bool:
            try:
                return bool(client.ping())
            except redis.exceptions.RedisError:
                return False

        return check


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def lines(log: str, level: str) -> list[str]:
    return [line for line in log.splitlines() if f" {level} " in line]


def test_a_redis_outage_is_one_warning_and_one_info_and_the_timer_still_fires(
    private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """Issue 12 item 11; W8/V8: the timer due during the outage fires after it."""
    plaita = Plaita(private_redis.url, f"plaita-outage-{uuid.uuid4().hex[:8]}", tmp_path)
    flow_file = tmp_path / "outage_nap.json"
    flow_file.write_text(json.dumps(NAP))
    try:
        plaita.run("flows", "register", str(flow_file), "--handler-modules", HANDLER_MODULE)
        worker = plaita.spawn(
            "worker",
            "worker",
            "--handler-modules",
            HANDLER_MODULE,
            "--read-block-ms",
            "100",
            "--concurrency",
            "2",
        )
        poll(
            lambda: "event=worker.started" in plaita.log_of(worker),
            timeout=15,
            what="the worker to start",
        )
        [execution_id] = plaita.start_executions("outage_nap", 1)
        waiting = plaita.wait_for_statuses([execution_id], {"suspended"}, timeout=15)
        wake_at_ms = waiting[execution_id]["waiting_for"]["wake_at_ms"]
        assert time.time() * 1000 < wake_at_ms - 1000, "the outage must begin before it is due"

        plaita.redis().close()
        plaita._redis = None
        private_redis.stop()
        stopped_at = time.time()
        time.sleep(OUTAGE_SECONDS)
        assert time.time() * 1000 > wake_at_ms, "the timer must fall due during the outage"
        private_redis.start()
        back_at = time.time()

        finished = plaita.wait_for_statuses([execution_id], TERMINAL, timeout=30, alive=[worker])
        recovered = poll(
            lambda: [ln for ln in plaita.log_of(worker).splitlines() if "store.recovered" in ln],
            timeout=20,
            what="event=store.recovered in the worker's log",
        )
        assert plaita.stop(worker) == 0
        log = plaita.log_of(worker)
    finally:
        plaita.stop_all()

    assert finished[execution_id]["status"] == "completed", log
    assert "Traceback" not in log, log
    loud = lines(log, "WARNING") + lines(log, "ERROR")
    assert len(loud) == 1 and "event=store.unreachable store=redis" in loud[0], loud
    assert lines(log, "ERROR") == []
    [info] = recovered
    assert " INFO " in info
    failures = int(re.search(r"failures=(\d+)", info).group(1))  # type: ignore[union-attr]
    outage_s = float(re.search(r"outage_s=([\d.]+)", info).group(1))  # type: ignore[union-attr]
    assert failures >= 3, info
    assert OUTAGE_SECONDS - 1 <= outage_s <= (time.time() - stopped_at), info
    assert back_at - stopped_at >= OUTAGE_SECONDS
