"""A worker on three queue partitions runs executions to the end: tasks, a sleep through the
partition's own delay set, every carrier of an execution on its partition (fake Redis)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import fakeredis
import pytest
from dependency_injector import providers

from plaita.application.tenancy import tenant_scope
from plaita.domain.errors import UnknownExecutionError
from plaita.domain.execution import ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.partitions import partition_of
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from ..application.conftest import handler_registry

NAP_THEN_WORK = {
    "flow_id": "nap",
    "start": "nap",
    "nodes": [
        {"id": "nap", "type": "sleep", "duration": 50, "next": "work"},
        {"id": "work", "type": "task", "handler": "t:work", "next": "again"},
        {"id": "again", "type": "task", "handler": "t:work", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}
P = 3


async def status(container: Container, execution_id: str) -> ExecutionStatus | None:
    try:
        return (await container.get_execution()(execution_id)).status
    except UnknownExecutionError:
        return None  # its start carrier is not processed yet


@pytest.fixture
async def container() -> AsyncIterator[Container]:
    settings = Settings(
        backend="redis", partitions=P, read_block_ms=50, registry_enabled=False, concurrency=4
    )
    container = build_container(settings)
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    container.redis_client.override(providers.Object(client))
    container.handlers.override(providers.Object(handler_registry(work=lambda p, ctx: "ok")))
    await container.flows().register(Flow.from_document(NAP_THEN_WORK), owner=SHARED)
    yield container
    await container.queue().close()
    await client.aclose()


async def test_a_worker_runs_executions_of_every_partition_to_the_end(
    container: Container,
) -> None:
    stop = asyncio.Event()
    worker = asyncio.create_task(container.worker().run(stop))
    try:
        with tenant_scope("default"):
            started = [
                (await container.start_execution()("nap", execution_id=f"order-{n}")).execution_id
                for n in range(9)
            ]
            assert {partition_of(x, P) for x in started} == set(range(P))
            statuses: list[ExecutionStatus | None] = []
            for _ in range(300):
                statuses = [await status(container, x) for x in started]
                if all(s is ExecutionStatus.COMPLETED for s in statuses):
                    break
                await asyncio.sleep(0.02)
            assert statuses == [ExecutionStatus.COMPLETED] * 9
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(worker, timeout=10)

    client = container.redis_client()
    keys = container.redis_keys()
    for k in range(P):
        # Start, wake-up and two hand-overs of each of the partition's executions, there only.
        mine = [x for x in started if partition_of(x, P) == k]
        assert await client.xlen(keys.queue_stream("default", k)) <= 4 * len(mine)
        assert await client.zcard(keys.queue_delayed("default", k)) == 0
    stats = await container.queue().stats()
    assert stats.pending == 0 and stats.oldest_unread_ms is None
    assert await client.exists(keys.queue_stream("default")) == 0
