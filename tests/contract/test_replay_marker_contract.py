"""ReplayMarkerStore contract (W10): one replay per dead letter while the marker lasts."""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.replay_markers import MemoryReplayMarkerStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.replay_markers import RedisReplayMarkerStore
from plaita.application.ports import ReplayMarkerStore

from .conftest import Elapse, FakeClock

#: A real DLQ key: it holds braces and colons, which the marker key must survive.
DLQ = "plaita:q:{default}:dlq"


class ReplayMarkerStoreContract:
    @pytest.fixture
    def markers(self) -> ReplayMarkerStore:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    async def test_the_first_claim_wins_and_a_second_is_refused(
        self, markers: ReplayMarkerStore
    ) -> None:
        assert await markers.claim(DLQ, "1-0", "first", ttl_ms=60_000) is True
        assert await markers.claim(DLQ, "1-0", "second", ttl_ms=60_000) is False
        assert await markers.get(DLQ, "1-0") == "first"

    async def test_markers_of_other_entries_and_other_queues_are_independent(
        self, markers: ReplayMarkerStore
    ) -> None:
        assert await markers.claim(DLQ, "1-0", "a", ttl_ms=60_000)
        assert await markers.claim(DLQ, "1-1", "b", ttl_ms=60_000)
        assert await markers.claim("plaita:q:{orders}:dlq", "1-0", "c", ttl_ms=60_000)
        assert await markers.get(DLQ, "2-0") is None

    async def test_release_gives_back_only_the_callers_own_marker(
        self, markers: ReplayMarkerStore
    ) -> None:
        await markers.claim(DLQ, "1-0", "mine", ttl_ms=60_000)
        assert await markers.release(DLQ, "1-0", "someone-else") is False
        assert await markers.get(DLQ, "1-0") == "mine"
        assert await markers.release(DLQ, "1-0", "mine") is True
        assert await markers.get(DLQ, "1-0") is None
        assert await markers.claim(DLQ, "1-0", "again", ttl_ms=60_000) is True

    async def test_releasing_a_missing_marker_is_false(self, markers: ReplayMarkerStore) -> None:
        assert await markers.release(DLQ, "9-9", "anything") is False

    async def test_a_marker_expires_after_its_ttl(
        self, markers: ReplayMarkerStore, elapse: Elapse
    ) -> None:
        await markers.claim(DLQ, "1-0", "first", ttl_ms=100)
        await elapse(250)
        assert await markers.get(DLQ, "1-0") is None
        assert await markers.claim(DLQ, "1-0", "second", ttl_ms=100) is True

    async def test_a_non_positive_ttl_is_refused(self, markers: ReplayMarkerStore) -> None:
        with pytest.raises(ValueError, match="ttl"):
            await markers.claim(DLQ, "1-0", "x", ttl_ms=0)


class TestMemoryReplayMarkerStore(ReplayMarkerStoreContract):
    @pytest.fixture
    def markers(self, clock: FakeClock) -> ReplayMarkerStore:
        return MemoryReplayMarkerStore(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestFakeRedisReplayMarkerStore(ReplayMarkerStoreContract):
    @pytest.fixture
    def markers(self, fake_redis: redis.Redis, keys: RedisKeys) -> ReplayMarkerStore:
        return RedisReplayMarkerStore(fake_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real


@pytest.mark.redis
class TestRedisReplayMarkerStore(ReplayMarkerStoreContract):
    @pytest.fixture
    def markers(self, real_redis: redis.Redis, keys: RedisKeys) -> ReplayMarkerStore:
        return RedisReplayMarkerStore(real_redis, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real
