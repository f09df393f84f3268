"""Shared fixtures of the contract suites: a fake clock, Redis clients, unique namespaces.

Each suite is a base class (not named ``Test*``) with abstract factory fixtures, subclassed
once per adapter family: memory (fake clock), fakeredis, and real Redis. Every real-Redis
test runs twice, on the single node at ``PLAITA_TEST_REDIS_URL`` and on the Redis Cluster
whose seed node is ``PLAITA_TEST_REDIS_CLUSTER_URL`` (each skipped when its variable is
unset; ``scripts/test`` sets both): the same suite, another topology. Redis clients run with
and without ``decode_responses`` because adapters must work with both.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import fakeredis
import pytest
import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys

REDIS_URL_VARIABLE = "PLAITA_TEST_REDIS_URL"
REDIS_SKIP_REASON = f"{REDIS_URL_VARIABLE} is unset; CI always sets it"
REDIS_CLUSTER_URL_VARIABLE = "PLAITA_TEST_REDIS_CLUSTER_URL"
REDIS_CLUSTER_SKIP_REASON = f"{REDIS_CLUSTER_URL_VARIABLE} is unset; CI always sets it"

Elapse = Callable[[int], Awaitable[None]]


class FakeClock:
    """A Clock that moves only when told to; ``advance`` moves wall and monotonic time."""

    def __init__(self, now_ms: int = 1_760_000_000_000) -> None:
        self._now_ms = now_ms
        self._monotonic_ms = 0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._monotonic_ms / 1000

    def advance(self, ms: int) -> None:
        self._now_ms += ms
        self._monotonic_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def advance_clock(clock: FakeClock) -> Elapse:
    """Let time pass for the memory family: the fake clock jumps, nothing sleeps."""

    async def elapse(ms: int) -> None:
        clock.advance(ms)

    return elapse


@pytest.fixture
def sleep_real() -> Elapse:
    """Let time pass for the Redis families: Redis measures idle time and TTLs itself."""

    async def elapse(ms: int) -> None:
        await asyncio.sleep(ms / 1000)

    return elapse


@pytest.fixture
def namespace() -> str:
    return f"plaita-test-{uuid.uuid4().hex}"


@pytest.fixture
def keys(namespace: str) -> RedisKeys:
    return RedisKeys(namespace)


@pytest.fixture(params=[False, True], ids=["bytes", "str"])
def decode_responses(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
async def fake_redis(decode_responses: bool) -> AsyncIterator[redis.Redis]:
    client = fakeredis.FakeAsyncRedis(
        server=fakeredis.FakeServer(), decode_responses=decode_responses
    )
    yield client
    await client.aclose()


@pytest.fixture(params=["node", "cluster"])
def redis_topology(request: pytest.FixtureRequest) -> str:
    """Which real Redis a test talks to: the single node or the cluster."""
    return str(request.param)


def real_redis_client(topology: str, *, decode_responses: bool, **options: object) -> redis.Redis:
    """A client of the real Redis of ``topology``; skips the test when it is not configured.

    The cluster client is redis-py's ``RedisCluster``: it follows MOVED and ASK and keeps a
    pool per node. Adapters take either (``plaita.adapters.redis.client.RedisClient``).
    """
    if topology == "cluster":
        url = os.environ.get(REDIS_CLUSTER_URL_VARIABLE)
        if not url:
            pytest.skip(REDIS_CLUSTER_SKIP_REASON)
        connection_class = options.pop("connection_class", None)
        cluster = redis.RedisCluster.from_url(url, decode_responses=decode_responses, **options)
        if connection_class is not None:
            # RedisCluster takes no connection class of its own: give every node it builds,
            # and the startup node it begins with, the recording one (tests that count the wire).
            cluster.nodes_manager.connection_kwargs["connection_class"] = connection_class
            for node in cluster.nodes_manager.startup_nodes.values():
                node.connection_class = connection_class
        return cluster  # type: ignore[return-value]
    url = os.environ.get(REDIS_URL_VARIABLE)
    if not url:
        pytest.skip(REDIS_SKIP_REASON)
    return redis.Redis.from_url(url, decode_responses=decode_responses, **options)


@pytest.fixture
async def real_redis(
    decode_responses: bool, namespace: str, redis_topology: str
) -> AsyncIterator[redis.Redis]:
    client = real_redis_client(redis_topology, decode_responses=decode_responses)
    if isinstance(client, redis.RedisCluster):
        # Learn the slot map before the test: redis-py's cluster client, met cold by
        # concurrent first commands, can hand a connection still being set up to a second
        # command (AttributeError on its writer) — a client-library race, not the store's.
        await client.initialize()
    yield client
    created = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
    if created:
        await client.delete(*created)
    await client.aclose()
