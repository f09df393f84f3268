"""RateBuckets contract (W23), run against memory, fakeredis (bytes and str) and real Redis
(single node and cluster).

A fresh bucket admits ``burst`` takes at once, then one per interval; a denied take is told
the first millisecond it would be admitted, or its turn behind the takes denied before it
(one interval apart); buckets are per key and per tenant (W24); concurrent takers never get
more than the bucket holds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.rate_buckets import MemoryRateBuckets
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.rate_buckets import SWAP_ATTEMPTS, RedisRateBuckets
from plaita.application.ports import RateBuckets
from plaita.application.tenancy import tenant_scope
from plaita.domain.rate_limits import RateRule, Take

NOW_MS = 1_760_000_000_000
FIVE_A_SECOND = RateRule(per_second=5, burst=5)


class RateBucketsContract:
    @pytest.fixture
    def buckets(self) -> RateBuckets:
        raise NotImplementedError

    async def test_a_fresh_bucket_admits_its_burst_then_says_when(
        self, buckets: RateBuckets
    ) -> None:
        with tenant_scope("default"):
            takes = [await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS) for _ in range(6)]

        assert [take.allowed for take in takes] == [True] * 5 + [False]
        assert takes[-1].due_ms == NOW_MS + 200

    async def test_a_denied_take_is_admitted_at_its_due_time_and_not_a_millisecond_before(
        self, buckets: RateBuckets
    ) -> None:
        rule = RateRule(per_second=3, burst=1)
        with tenant_scope("default"):
            assert (await buckets.take("api", rule, now_ms=NOW_MS)).allowed
            denied = await buckets.take("api", rule, now_ms=NOW_MS + 1)
            early = await buckets.take("api", rule, now_ms=denied.due_ms - 1)
            on_time = await buckets.take("api", rule, now_ms=denied.due_ms)

        assert (denied.allowed, early.allowed, on_time.allowed) == (False, False, True)
        assert denied.due_ms == NOW_MS + 334  # 1/3 s, rounded up to the next whole ms
        # Denied again, the early comer is queued behind the first denial's turn; the token
        # itself was not reserved, so the take on time got it.
        assert early.due_ms == NOW_MS + 334 + 334

    async def test_waiters_are_told_turns_one_interval_apart_in_the_order_denied(
        self, buckets: RateBuckets
    ) -> None:
        rule = RateRule(per_second=5, burst=1)
        with tenant_scope("default"):
            assert (await buckets.take("api", rule, now_ms=NOW_MS)).allowed
            waiters = [await buckets.take("api", rule, now_ms=NOW_MS + 1) for _ in range(4)]
            back = [await buckets.take("api", rule, now_ms=w.due_ms) for w in waiters]

        assert [w.due_ms for w in waiters] == [NOW_MS + 200 * n for n in range(1, 5)]
        assert [w.allowed for w in waiters] == [False] * 4
        assert [b.allowed for b in back] == [True] * 4, "each came back on its turn and ran"

    async def test_a_bucket_refills_at_its_rate(self, buckets: RateBuckets) -> None:
        with tenant_scope("default"):
            for _ in range(5):
                await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS)
            later = [
                await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS + 400) for _ in range(3)
            ]

        assert [take.allowed for take in later] == [True, True, False]

    async def test_an_idle_bucket_is_full_again(self, buckets: RateBuckets) -> None:
        with tenant_scope("default"):
            for _ in range(5):
                await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS)
            again = [
                await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS + 60_000) for _ in range(6)
            ]

        assert [take.allowed for take in again] == [True] * 5 + [False]

    async def test_keys_and_tenants_have_their_own_buckets(self, buckets: RateBuckets) -> None:
        rule = RateRule(per_second=1, burst=1)
        with tenant_scope("default"):
            assert (await buckets.take("api", rule, now_ms=NOW_MS)).allowed
            assert (await buckets.take("other:{api}", rule, now_ms=NOW_MS)).allowed
            assert not (await buckets.take("api", rule, now_ms=NOW_MS)).allowed
        with tenant_scope("acme"):
            assert (await buckets.take("api", rule, now_ms=NOW_MS)).allowed
            assert not (await buckets.take("api", rule, now_ms=NOW_MS)).allowed

    async def test_concurrent_takers_never_get_more_than_the_burst(
        self, buckets: RateBuckets
    ) -> None:
        async def take() -> bool:
            with tenant_scope("default"):
                return (await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS)).allowed

        admitted = await asyncio.gather(*(take() for _ in range(20)))

        assert 1 <= sum(admitted) <= 5


class TestMemoryRateBuckets(RateBucketsContract):
    @pytest.fixture
    def buckets(self) -> RateBuckets:
        return MemoryRateBuckets()


class RedisRateBucketsContract(RateBucketsContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def buckets(self, client: redis.Redis, keys: RedisKeys) -> RateBuckets:
        return RedisRateBuckets(client, keys)

    async def test_a_bucket_expires_once_its_tat_has_passed(
        self, client: redis.Redis, keys: RedisKeys, buckets: RateBuckets
    ) -> None:
        with tenant_scope("acme"):
            for _ in range(3):
                await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS)
            bucket = keys.rate_bucket("api")

        # Three takes moved the TAT 600 ms past now: kept that long and a 1 s grace.
        assert 1_000 < await client.pttl(bucket) <= 1_600
        assert bucket.startswith(f"{keys.tenant_namespace('acme')}:rate:{{")

    async def test_a_bucket_with_waiters_is_kept_until_their_turns_have_passed(
        self, client: redis.Redis, keys: RedisKeys, buckets: RateBuckets
    ) -> None:
        rule = RateRule(per_second=5, burst=1)
        with tenant_scope("default"):
            await buckets.take("api", rule, now_ms=NOW_MS)
            for _ in range(10):  # turns up to 2.2 s on: the tail, in the bucket's one key
                await buckets.take("api", rule, now_ms=NOW_MS)
            bucket = keys.rate_bucket("api")

        assert 3_000 < await client.pttl(bucket) <= 3_200
        value = await client.get(bucket)
        assert (value if isinstance(value, str) else value.decode()) == (
            f"{(NOW_MS + 200) * 1_000}:{(NOW_MS + 2_200) * 1_000}"
        )

    async def test_a_bucket_written_before_the_tail_existed_reads_as_no_queue(
        self, client: redis.Redis, keys: RedisKeys, buckets: RateBuckets
    ) -> None:
        rule = RateRule(per_second=5, burst=1)
        with tenant_scope("default"):
            await client.set(keys.rate_bucket("api"), str((NOW_MS + 200) * 1_000))
            take = await buckets.take("api", rule, now_ms=NOW_MS)

        assert (take.allowed, take.due_ms) == (False, NOW_MS + 200)


class RivalTaker:
    """A Redis client whose scripts meet another taker first: before each of the first
    ``races`` swaps, the rival writes the bucket (a TAT long past, another each time), so the
    swap finds another value than the one read."""

    def __init__(self, client: redis.Redis, races: int) -> None:
        self._client = client
        self.races = races

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def register_script(self, source: str) -> Any:
        script = self._client.register_script(source)

        async def call(*, keys: list[str], args: list[Any]) -> Any:
            if self.races > 0:
                self.races -= 1
                await self._client.set(keys[0], f"{self.races}:0")
            return await script(keys=keys, args=args)

        return call


@pytest.mark.parametrize("races", [1, SWAP_ATTEMPTS - 1])
async def test_a_taker_that_loses_a_race_decides_again_from_what_won(
    fake_redis: redis.Redis, keys: RedisKeys, races: int
) -> None:
    buckets = RedisRateBuckets(RivalTaker(fake_redis, races), keys)  # type: ignore[arg-type]
    with tenant_scope("default"):
        take = await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS)

    assert take.allowed


async def test_a_taker_that_keeps_losing_races_is_told_to_try_again_later(
    fake_redis: redis.Redis, keys: RedisKeys
) -> None:
    """Never an error, never a wait: the caller reschedules its carrier one interval on."""
    rival = RivalTaker(fake_redis, SWAP_ATTEMPTS)
    buckets = RedisRateBuckets(rival, keys)  # type: ignore[arg-type]
    with tenant_scope("default"):
        take = await buckets.take("api", FIVE_A_SECOND, now_ms=NOW_MS)

    assert take == Take(allowed=False, due_ms=NOW_MS + 200)
    assert rival.races == 0


class TestFakeRedisRateBuckets(RedisRateBucketsContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisRateBuckets(RedisRateBucketsContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
