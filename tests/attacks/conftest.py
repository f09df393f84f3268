"""The attack suite: hostile input written straight to the stream, against real processes.

Each scenario starts real ``plaita worker`` processes on the real Redis at
``PLAITA_TEST_REDIS_URL`` (skipped when unset) in a namespace of its own, through the same
``Plaita`` runner as the process tests: every wait is a bounded poll and every process is
stopped by its pid. The timings (reclaim after 1.5 s idle, lease TTL 3 s, 100 ms reads) keep
each scenario to seconds, so the suite is part of the normal test run.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
import redis

# The process tests' runner and its fixture (imported, it serves this folder too).
from ..integration.conftest import REDIS_URL, Plaita, plaita, poll, worker_args

__all__ = ["plaita"]


@pytest.fixture
def raw_redis() -> Iterator[redis.Redis]:
    """A client that leaves replies as bytes: it can read back what an attacker wrote."""
    assert REDIS_URL is not None
    client = redis.Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        client.close()


def start_with_inputs(
    plaita: Plaita, flow_id: str, inputs: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Start one execution of ``flow_id`` per input, through ``StartExecution``, in-process."""
    from plaita.application.tenancy import tenant_scope
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.settings import Settings

    async def start_all() -> list[str]:
        settings = Settings(backend="redis", redis_url=plaita.redis_url, namespace=plaita.namespace)
        container = build_container(settings)
        try:
            start = container.start_execution()
            with tenant_scope("default"):
                return [(await start(flow_id, params=dict(p))).execution_id for p in inputs]
        finally:
            await container.redis_client().aclose()

    return asyncio.run(start_all())


def spawn_worker(plaita: Plaita, name: str, *, concurrency: int = 16) -> subprocess.Popen[bytes]:
    """A worker with the process tests' short timings; returns once it runs."""
    consumer = f"{name}-{uuid.uuid4().hex[:8]}"
    process = plaita.spawn(name, *worker_args(consumer, concurrency=concurrency))
    poll(
        lambda: process.poll() is not None or "worker.started" in plaita.log_of(process),
        timeout=15,
        what=f"worker {name} to start\n{plaita.logs()}",
    )
    assert process.poll() is None, f"worker {name} exited at start-up\n{plaita.logs()}"
    return process
