"""The attack suite: the outside campaign's scenarios, on real processes, in bounded form.

Each scenario starts real ``plaita worker`` processes in a namespace of its own, through the
same ``Plaita`` runner as the process tests: every wait is a bounded poll and every process
is stopped by its pid. The timings (reclaim after 1.5 s idle, lease TTL 3 s, 100 ms reads)
keep each scenario to seconds, so the suite is part of the normal test run. Most run on the
shared test Redis at ``PLAITA_TEST_REDIS_URL``; scenarios that disturb Redis itself for every
client (``CLIENT KILL``, ``CLIENT PAUSE``) run against a private ``redis-server`` started on
a free loopback port and stopped by its pid, so they never touch what other suites use.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from ..integration.conftest import (
    REDIS_URL,
    Plaita,
    isolated_plaita,
    poll,
    share_fault_timings,
    worker_args,
)


@pytest.fixture
def plaita(tmp_path: Path) -> Iterator[Plaita]:
    """The process tests' runner on the shared test Redis, in a namespace of its own, its
    pool sharing the suites' short timings (a test may ``share`` other budgets first)."""
    with isolated_plaita(tmp_path) as runner:
        share_fault_timings(runner)
        yield runner


@pytest.fixture
def raw_redis() -> Iterator[redis.Redis]:
    """A client that leaves replies as bytes: it can read back what an attacker wrote."""
    assert REDIS_URL is not None
    client = redis.Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def _private_redis_server(workdir: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed; scripts/test installs it"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    arguments = ["--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    arguments += ["--appendonly", "no", "--dir", str(workdir)]
    process = subprocess.Popen(
        [binary, *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise AssertionError(
                        f"the private redis-server on {port} did not start"
                    ) from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@pytest.fixture
def private_plaita(tmp_path: Path) -> Iterator[Plaita]:
    """``plaita`` processes on a redis-server of this test alone; all stopped at teardown."""
    with _private_redis_server(tmp_path) as url:
        runner = Plaita(url, f"plaita-attack-{uuid.uuid4().hex[:8]}", tmp_path)
        share_fault_timings(runner)
        try:
            yield runner
        finally:
            runner.stop_all()
            runner.redis().close()


def start_with_inputs(
    plaita: Plaita, flow_id: str, inputs: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Start one execution of ``flow_id`` per input, through ``StartExecution``, in-process."""
    from plaita.application.tenancy import tenant_scope
    from plaita.entrypoints.container import build_container

    async def start_all() -> list[str]:
        # The pool's own settings: a producer of another budget generation would have its
        # carriers left pending by every worker (W12).
        container = build_container(plaita.settings())
        try:
            start = container.start_execution()
            with tenant_scope("default"):
                return [(await start(flow_id, params=dict(p))).execution_id for p in inputs]
        finally:
            await container.redis_client().aclose()

    return asyncio.run(start_all())


def spawn_worker(
    plaita: Plaita, name: str, *extra: str, concurrency: int = 16
) -> subprocess.Popen[bytes]:
    """A worker with the process tests' short timings (and ``extra`` flags); returns once it
    runs."""
    consumer = f"{name}-{uuid.uuid4().hex[:8]}"
    process = plaita.spawn(name, *worker_args(consumer, concurrency=concurrency), *extra)
    poll(
        lambda: process.poll() is not None or "worker.started" in plaita.log_of(process),
        timeout=15,
        what=f"worker {name} to start\n{plaita.logs()}",
    )
    assert process.poll() is None, f"worker {name} exited at start-up\n{plaita.logs()}"
    return process
