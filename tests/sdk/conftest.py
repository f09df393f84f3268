"""Fixtures of the Python API tests: a client URL for each store plaita serves, in a
namespace of its own (``PLAITA_NAMESPACE``, read by every client like every process)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as redis

import plaita
from plaita.domain.errors import UnknownExecutionError

APPROVAL: dict[str, Any] = {
    "flow_id": "sdk_approval",
    "version": "1",
    "start": "submit",
    "nodes": [
        {
            "id": "submit",
            "type": "task",
            "handler": "tests.sdk.handlers:submit",
            "params": {"amount": "${amount}"},
            "next": "wait",
        },
        {"id": "wait", "type": "event", "event_type": "expense.decided", "next": "decide"},
        {
            "id": "decide",
            "type": "task",
            "handler": "tests.sdk.handlers:decide",
            "params": {"decision": "${$NODE['wait']['data']}"},
            "next": "done",
        },
        {
            "id": "done",
            "type": "end",
            "output": "{'approved': $NODE['decide']['approved'], 'amount': amount}",
        },
    ],
}

FAILING: dict[str, Any] = {
    "flow_id": "sdk_failing",
    "start": "refuse",
    "nodes": [
        {
            "id": "refuse",
            "type": "task",
            "handler": "tests.sdk.handlers:refuse",
            "params": {"amount": "${amount}"},
            "next": "done",
        },
        {"id": "done", "type": "end"},
    ],
}

HANDLER_MODULES = ["tests.sdk.handlers"]


def store_url(store: str) -> str:
    if store == "memory":
        return "memory://"
    if store == "redis":
        return os.environ["PLAITA_TEST_REDIS_URL"]
    return os.environ["PLAITA_TEST_REDIS_CLUSTER_URL"].replace("redis://", "redis+cluster://", 1)


@pytest.fixture
def namespace(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"plaita-sdk-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("PLAITA_NAMESPACE", name)
    yield name


@pytest.fixture(params=["memory", "redis", "cluster"])
async def url(request: pytest.FixtureRequest, namespace: str) -> AsyncIterator[str]:
    """The store of the test: the memory twin, the Redis node, the Redis Cluster; what a
    Redis test wrote is removed after it."""
    store = str(request.param)
    yield store_url(store)
    if store == "memory":
        return
    if store == "redis":
        client: Any = redis.Redis.from_url(os.environ["PLAITA_TEST_REDIS_URL"])
    else:
        client = redis.RedisCluster.from_url(os.environ["PLAITA_TEST_REDIS_CLUSTER_URL"])
    created = [key async for key in client.scan_iter(match=f"{namespace}*", count=1000)]
    for key in created:
        await client.delete(key)
    await client.aclose()


async def wait_for_status(
    handle: plaita.ExecutionHandle, status: plaita.ExecutionStatus, *, seconds: float = 10.0
) -> None:
    async with asyncio.timeout(seconds):
        while True:
            try:
                if await handle.status() is status:
                    return
            except UnknownExecutionError:
                pass  # its start carrier is still queued
            await asyncio.sleep(0.02)
