"""DedupStore contract (W6): a key starts one execution per tenant until its TTL passes; a claim
says how old it is and whether its start carrier was confirmed, so an orphan can be told apart."""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.dedup import MemoryDedupStore
from plaita.adapters.redis.dedup import RedisDedupStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.application.ports import DedupStore

from .conftest import Elapse, FakeClock


class DedupStoreContract:
    @pytest.fixture
    def dedup(self) -> DedupStore:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    async def test_first_claim_wins_and_later_claims_get_its_execution(
        self, dedup: DedupStore
    ) -> None:
        assert await dedup.claim("order:7", "x-1", tenant_id="default", ttl_ms=60_000) is None
        holder = await dedup.claim("order:7", "x-2", tenant_id="default", ttl_ms=60_000)
        assert holder is not None
        assert holder.execution_id == "x-1"
        assert not holder.carrier_enqueued

    async def test_a_claim_tells_its_age(self, dedup: DedupStore, elapse: Elapse) -> None:
        assert await dedup.claim("k", "x-1", tenant_id="default", ttl_ms=60_000) is None
        await elapse(300)

        holder = await dedup.claim("k", "x-2", tenant_id="default", ttl_ms=60_000)
        assert holder is not None and holder.age_ms is not None
        assert 250 <= holder.age_ms <= 5_000

    async def test_a_confirmed_claim_says_its_carrier_was_enqueued(self, dedup: DedupStore) -> None:
        assert await dedup.claim("k", "x-1", tenant_id="default", ttl_ms=60_000) is None
        assert not await dedup.confirm("k", "x-2", tenant_id="default")
        assert await dedup.confirm("k", "x-1", tenant_id="default")

        holder = await dedup.claim("k", "x-2", tenant_id="default", ttl_ms=60_000)
        assert holder is not None and holder.carrier_enqueued

    async def test_a_released_confirmed_claim_leaves_no_mark_for_the_next(
        self, dedup: DedupStore
    ) -> None:
        """W6: an orphan released and claimed again starts unconfirmed."""
        await dedup.claim("k", "x-1", tenant_id="default", ttl_ms=60_000)
        await dedup.confirm("k", "x-1", tenant_id="default")
        assert await dedup.release("k", "x-1", tenant_id="default")
        assert await dedup.claim("k", "x-2", tenant_id="default", ttl_ms=60_000) is None

        holder = await dedup.claim("k", "x-3", tenant_id="default", ttl_ms=60_000)
        assert holder is not None
        assert (holder.execution_id, holder.carrier_enqueued) == ("x-2", False)

    async def test_confirming_an_unknown_key_claims_nothing(self, dedup: DedupStore) -> None:
        assert not await dedup.confirm("k", "x-1", tenant_id="default")
        assert await dedup.claim("k", "x-2", tenant_id="default", ttl_ms=60_000) is None

    async def test_tenants_do_not_share_keys(self, dedup: DedupStore) -> None:
        assert await dedup.claim("order:7", "x-1", tenant_id="acme", ttl_ms=60_000) is None
        assert await dedup.claim("order:7", "x-2", tenant_id="globex", ttl_ms=60_000) is None

    async def test_a_claim_expires_after_its_ttl(self, dedup: DedupStore, elapse: Elapse) -> None:
        assert await dedup.claim("k", "x-1", tenant_id="default", ttl_ms=100) is None
        await elapse(250)
        assert await dedup.claim("k", "x-2", tenant_id="default", ttl_ms=100) is None

    async def test_release_frees_the_key_only_for_its_holder(self, dedup: DedupStore) -> None:
        """W13: a deleted execution's key is released; someone else's claim never is."""
        assert await dedup.claim("k", "x-1", tenant_id="default", ttl_ms=60_000) is None
        assert not await dedup.release("k", "x-2", tenant_id="default")
        assert await dedup.release("k", "x-1", tenant_id="default")
        assert await dedup.claim("k", "x-3", tenant_id="default", ttl_ms=60_000) is None


class TestMemoryDedupStore(DedupStoreContract):
    @pytest.fixture
    def dedup(self, clock: FakeClock) -> DedupStore:
        return MemoryDedupStore(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestFakeRedisDedupStore(DedupStoreContract):
    @pytest.fixture
    def dedup(self, fake_redis: redis.Redis, keys: RedisKeys) -> DedupStore:
        return RedisDedupStore(fake_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real


@pytest.mark.redis
class TestRedisDedupStore(DedupStoreContract):
    @pytest.fixture
    def dedup(self, real_redis: redis.Redis, keys: RedisKeys) -> DedupStore:
        return RedisDedupStore(real_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real
