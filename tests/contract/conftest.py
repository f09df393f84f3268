"""Shared fixtures of the contract suites: a fake clock, Redis clients, unique namespaces.

Each suite is a base class (not named ``Test*``) with abstract factory fixtures, subclassed
once per adapter family: memory (fake clock), fakeredis, and real Redis at
``PLAITA_TEST_REDIS_URL`` (skipped when unset). Redis clients run with and without
``decode_responses`` because adapters must work with both.
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


@pytest.fixture
async def real_redis(decode_responses: bool, namespace: str) -> AsyncIterator[redis.Redis]:
    url = os.environ.get(REDIS_URL_VARIABLE)
    if not url:
        pytest.skip(REDIS_SKIP_REASON)
    client = redis.Redis.from_url(url, decode_responses=decode_responses)
    yield client
    created = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
    if created:
        await client.delete(*created)
    await client.aclose()
