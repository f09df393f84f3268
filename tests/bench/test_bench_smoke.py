"""Every script in ``bench/`` runs, with tiny sizes, so none rots between measurements.

These are not measurements — the figures live in ``bench/RESULTS.md`` — only proof that each
script still builds what it measures against today's code and finishes with exit code 0 on
a real Redis (the test database's; each script works in a namespace of its own and deletes
it). Each run is a real process, bounded by a timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import requires_redis

pytestmark = [requires_redis, pytest.mark.process, pytest.mark.timeout(180)]

BENCH = Path(__file__).resolve().parents[2] / "bench"
REDIS_URL = os.environ.get("PLAITA_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def run_bench(script: str, *args: str) -> str:
    """Run ``bench/<script>`` to its end; its standard output."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=BENCH.parent,
        check=False,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_engine_overhead_runs() -> None:
    out = run_bench("engine_overhead.py", "--nodes", "2", "--repeats", "1", "--min-repeats", "1")
    assert "process-task, 1 node/dispatch" in out


def test_worker_throughput_runs() -> None:
    out = run_bench(
        "worker_throughput.py",
        "--redis-url",
        REDIS_URL,
        "--executions",
        "5",
        "--nodes",
        "2",
        "--runs",
        "1",
        "--concurrency",
        "4",
    )
    assert "steps/s" in out


def test_worker_throughput_runs_two_worker_processes() -> None:
    out = run_bench(
        "worker_throughput.py",
        "--redis-url",
        REDIS_URL,
        "--executions",
        "6",
        "--nodes",
        "1",
        "--runs",
        "1",
        "--workers",
        "2",
    )
    assert "steps/s" in out


def test_event_latency_runs() -> None:
    out = run_bench("event_latency.py", "--redis-url", REDIS_URL, "--events", "5", "--warmup", "1")
    assert "p50" in out


def test_fanout_runs() -> None:
    out = run_bench(
        "fanout.py",
        "--redis-url",
        REDIS_URL,
        "--items",
        "6",
        "--concurrency",
        "3",
        "--workers",
        "1",
        "--runs",
        "1",
    )
    assert "children/s" in out


def test_result_latency_runs() -> None:
    out = run_bench("result_latency.py", "--runs", "3", "--warmup", "1")
    assert "p50 ms" in out


def test_recovery_runs() -> None:
    out = run_bench(
        "recovery.py",
        "--redis-url",
        REDIS_URL,
        "--runs",
        "1",
        "--executions",
        "2",
        "--hold",
        "8",
        "--timeout",
        "60",
    )
    assert "executions recovered" in out


def test_tenant_gate_runs() -> None:
    out = run_bench(
        "tenant_gate.py", "--redis-url", REDIS_URL, "--dispatches", "3", "--warm-up", "1"
    )
    assert "default, no record" in out and "tenant with a quota" in out


def test_priority_reads_runs() -> None:
    out = run_bench(
        "priority_reads.py", "--redis-url", REDIS_URL, "--rounds", "1", "--carriers", "5"
    )
    assert "one stream: median" in out and "three streams: median" in out
