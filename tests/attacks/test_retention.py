"""Retention under load (S5, W13, W4): 200 executions through a real worker on real Redis.

Nothing is kept forever: the task stream stays short once its carriers are acked, every key
of a terminal execution carries a TTL within the retention (the generation counter none),
live executions carry none, and a delete leaves only the tombstone and the generation
counter. Nothing pending is lost on the way: every execution reaches its state.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..integration.conftest import REDIS_URL, Plaita, poll, requires_redis

pytestmark = [requires_redis, pytest.mark.process]

COMPLETING = 180
WAITING = 20
RETENTION_DAYS = 1
RETENTION_MS = RETENTION_DAYS * 24 * 3600 * 1000
DELETED_COMPLETED = 10
DELETED_WAITING = 5


@pytest.fixture
def plaita(tmp_path: Path) -> Iterator[Plaita]:
    """As the integration suites': an isolated namespace, every process stopped, every key
    deleted afterwards (a conftest there does not reach this folder)."""
    assert REDIS_URL is not None
    runner = Plaita(REDIS_URL, f"plaita-attack-{uuid.uuid4().hex[:12]}", tmp_path)
    try:
        yield runner
    finally:
        runner.stop_all()
        client = runner.redis()
        try:
            for key in client.scan_iter(match=f"{runner.namespace}:*", count=1000):
                client.delete(key)
        finally:
            client.close()


def start_all(plaita: Plaita) -> tuple[list[str], list[str]]:
    """Start the executions from this process: small amounts complete on their own, large
    ones wait for an approval that never comes."""
    from plaita.application.tenancy import tenant_scope
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.settings import Settings

    async def start() -> tuple[list[str], list[str]]:
        container = build_container(
            Settings(backend="redis", redis_url=plaita.redis_url, namespace=plaita.namespace)
        )
        try:
            begin = container.start_execution()
            with tenant_scope("default"):
                small = [
                    (await begin("approval", params={"amount": 250})).execution_id
                    for _ in range(COMPLETING)
                ]
                large = [
                    (await begin("approval", params={"amount": 5000})).execution_id
                    for _ in range(WAITING)
                ]
            return small, large
        finally:
            await container.redis_client().aclose()

    return asyncio.run(start())


def delete_all(plaita: Plaita, execution_ids: list[str]) -> None:
    """Delete through the same use case as ``plaita executions delete``, in this process."""
    from plaita.application.tenancy import tenant_scope
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.settings import Settings

    async def delete() -> None:
        container = build_container(
            Settings(
                backend="redis",
                redis_url=plaita.redis_url,
                namespace=plaita.namespace,
                retention_days=RETENTION_DAYS,
            )
        )
        try:
            with tenant_scope("default"):
                for execution_id in execution_ids:
                    await container.delete_execution()(execution_id, reason="retention attack")
        finally:
            await container.redis_client().aclose()

    asyncio.run(delete())


def execution_ttls(plaita: Plaita, execution_id: str) -> dict[str, int]:
    """Every key of the execution by suffix, with its PTTL."""
    client = plaita.redis()
    pattern = plaita.key(f"x:{{{execution_id}}}:*")
    return {
        key.rsplit(":", 1)[1]: int(client.pttl(key))
        for key in client.scan_iter(match=pattern, count=1000)
    }


def test_two_hundred_executions_leave_a_short_stream_and_nothing_without_a_ttl(
    plaita: Plaita,
) -> None:
    """S5: acked carriers are trimmed, terminal executions expire, live ones stay; W13: a
    delete leaves the tombstone and the generation counter only (W4: no TTL on it)."""
    plaita.run("flows", "register", "examples/flows/approval.json")
    worker = plaita.spawn(
        "worker",
        "worker",
        "--flows",
        "examples/flows",
        "--handler-modules",
        "examples.handlers",
        "--read-block-ms",
        "100",
        "--concurrency",
        "32",
        "--retention-days",
        str(RETENTION_DAYS),
        env={"PLAITA_STREAM_TRIM_INTERVAL_SECONDS": "0.5"},
    )
    small, large = start_all(plaita)

    views = plaita.wait_for_statuses(
        small + large, {"completed", "suspended", "error"}, timeout=120, alive=[worker]
    )
    assert {views[i]["status"] for i in small} == {"completed"}, plaita.logs()
    assert {views[i]["status"] for i in large} == {"suspended"}, plaita.logs()

    client = plaita.redis()
    # Every carrier was appended to the stream and acked; the trim leaves (almost) none.
    added = int(client.xinfo_stream(plaita.stream)["entries-added"])
    assert added >= COMPLETING + WAITING
    poll(
        lambda: client.xlen(plaita.stream) <= 5,
        timeout=15,
        what=f"the task stream to be trimmed (length {client.xlen(plaita.stream)} of {added})",
    )
    assert client.xpending(plaita.stream, "plaita-workers")["pending"] == 0

    for execution_id in small:
        ttls = execution_ttls(plaita, execution_id)
        assert ttls.pop("fencegen") == -1, execution_id
        assert {"state", "nodes"} <= set(ttls), (execution_id, ttls)
        assert all(0 < ttl <= RETENTION_MS for ttl in ttls.values()), (execution_id, ttls)
    for execution_id in large:
        ttls = execution_ttls(plaita, execution_id)
        assert (ttls["state"], ttls["nodes"], ttls["fencegen"]) == (-1, -1, -1), ttls

    deleted = small[:DELETED_COMPLETED] + large[:DELETED_WAITING]
    started = time.monotonic()
    delete_all(plaita, deleted)
    assert time.monotonic() - started < 30
    for execution_id in deleted:
        ttls = execution_ttls(plaita, execution_id)
        assert set(ttls) == {"fencegen", "tombstone"}, (execution_id, ttls)
        assert ttls["fencegen"] == -1 and ttls["tombstone"] > 0
        assert client.zscore(plaita.key("executions"), execution_id) is None

    assert plaita.stop(worker) == 0, plaita.log_of(worker)
