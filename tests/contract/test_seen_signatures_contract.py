"""SeenSignatures contract (V10), the webhooks' replay guard, run against memory, fakeredis
and real Redis (node and cluster): a signature is accepted once while its mark lasts."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.hooks import MemorySeenSignatures
from plaita.adapters.redis.hooks import RedisSeenSignatures
from plaita.adapters.redis.keys import RedisKeys
from plaita.application.ports import SeenSignatures

from .conftest import Elapse, FakeClock

SIGNATURE = "2624a8dd5ad6c27cfdeedfeb6451da1343768293585367612ff2b35fc0261b0b"


class SeenSignaturesContract:
    @pytest.fixture
    def seen(self) -> SeenSignatures:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    async def test_the_first_claim_wins_and_a_second_is_a_replay(
        self, seen: SeenSignatures
    ) -> None:
        assert await seen.claim("payments", SIGNATURE, ttl_ms=60_000) is True
        assert await seen.claim("payments", SIGNATURE, ttl_ms=60_000) is False

    async def test_of_concurrent_claims_exactly_one_wins(self, seen: SeenSignatures) -> None:
        # A connection open first, as in any running process: redis-py's cluster client can
        # fail commands racing on a connection that is still opening (seen with redis-py 8.1).
        await seen.release("warm-up", SIGNATURE)
        claimed = await asyncio.gather(
            *(seen.claim("payments", SIGNATURE, ttl_ms=60_000) for _ in range(8))
        )
        assert sorted(claimed) == [False] * 7 + [True]

    async def test_marks_of_other_hooks_and_signatures_are_independent(
        self, seen: SeenSignatures
    ) -> None:
        assert await seen.claim("payments", SIGNATURE, ttl_ms=60_000)
        assert await seen.claim("refunds", SIGNATURE, ttl_ms=60_000)
        assert await seen.claim("pay:ments", SIGNATURE, ttl_ms=60_000)
        assert await seen.claim("payments", "0" * 64, ttl_ms=60_000)

    async def test_a_mark_expires_after_its_ttl(self, seen: SeenSignatures, elapse: Elapse) -> None:
        await seen.claim("payments", SIGNATURE, ttl_ms=100)
        await elapse(250)
        assert await seen.claim("payments", SIGNATURE, ttl_ms=100) is True

    async def test_a_released_mark_may_be_claimed_again(self, seen: SeenSignatures) -> None:
        await seen.claim("payments", SIGNATURE, ttl_ms=60_000)
        await seen.release("payments", SIGNATURE)
        assert await seen.claim("payments", SIGNATURE, ttl_ms=60_000) is True

    async def test_releasing_a_missing_mark_changes_nothing(self, seen: SeenSignatures) -> None:
        await seen.release("payments", SIGNATURE)
        assert await seen.claim("payments", SIGNATURE, ttl_ms=60_000) is True

    async def test_a_non_positive_ttl_is_refused(self, seen: SeenSignatures) -> None:
        with pytest.raises(ValueError, match="ttl"):
            await seen.claim("payments", SIGNATURE, ttl_ms=0)


class TestMemorySeenSignatures(SeenSignaturesContract):
    @pytest.fixture
    def seen(self, clock: FakeClock) -> SeenSignatures:
        return MemorySeenSignatures(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestFakeRedisSeenSignatures(SeenSignaturesContract):
    @pytest.fixture
    def seen(self, fake_redis: redis.Redis, keys: RedisKeys) -> SeenSignatures:
        return RedisSeenSignatures(fake_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real


@pytest.mark.redis
class TestRedisSeenSignatures(SeenSignaturesContract):
    @pytest.fixture
    def seen(self, real_redis: redis.Redis, keys: RedisKeys) -> SeenSignatures:
        return RedisSeenSignatures(real_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real
