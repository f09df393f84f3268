"""WorkerRegistry contract (W16), run against every adapter family."""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.registry import MemoryWorkerRegistry
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.registry import RedisWorkerRegistry
from plaita.application.ports import WorkerInstance, WorkerRegistry

from .conftest import Elapse, FakeClock

NOW = 1_760_000_000_000
TTL_MS = 30_000


def instance(instance_id: str = "w-1", status: str = "running", beat: int = 0) -> WorkerInstance:
    return WorkerInstance(
        instance_id=instance_id,
        status=status,
        heartbeat_ms=NOW + beat,
        started_ms=NOW,
        config_family="fam-1",
        config_generation="cfg-1",
        budget_generation="bud-1",
    )


class WorkerRegistryContract:
    @pytest.fixture
    def registry(self) -> WorkerRegistry:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    async def test_an_unknown_instance_is_none(self, registry: WorkerRegistry) -> None:
        assert await registry.get("never") is None
        assert await registry.list() == []

    async def test_put_then_get_returns_the_record(self, registry: WorkerRegistry) -> None:
        record = instance()
        await registry.put(record, ttl_ms=TTL_MS)

        assert await registry.get("w-1") == record

    async def test_defaults_round_trip(self, registry: WorkerRegistry) -> None:
        record = WorkerInstance("w-1", "starting", heartbeat_ms=NOW, started_ms=NOW)
        await registry.put(record, ttl_ms=TTL_MS)

        assert await registry.get("w-1") == record

    async def test_put_again_replaces_status_and_heartbeat(self, registry: WorkerRegistry) -> None:
        """W16: starting → running → draining, each written at once."""
        for beat, status in enumerate(("starting", "running", "draining")):
            await registry.put(instance(status=status, beat=beat), ttl_ms=TTL_MS)

        assert await registry.get("w-1") == instance(status="draining", beat=2)
        assert await registry.list() == [instance(status="draining", beat=2)]

    async def test_list_returns_every_live_instance_once(self, registry: WorkerRegistry) -> None:
        for instance_id in ("w-2", "w-1", "host:42:{x}"):
            await registry.put(instance(instance_id), ttl_ms=TTL_MS)
        await registry.put(instance("w-1", status="stopping"), ttl_ms=TTL_MS)

        listed = await registry.list()

        assert sorted(listed, key=lambda i: i.instance_id) == [
            instance("host:42:{x}"),
            instance("w-1", status="stopping"),
            instance("w-2"),
        ]

    async def test_remove_deletes_the_record(self, registry: WorkerRegistry) -> None:
        await registry.put(instance("w-1"), ttl_ms=TTL_MS)
        await registry.put(instance("w-2"), ttl_ms=TTL_MS)

        await registry.remove("w-1")
        await registry.remove("never")  # harmless

        assert await registry.get("w-1") is None
        assert await registry.list() == [instance("w-2")]

    async def test_a_record_expires_after_its_ttl(
        self, registry: WorkerRegistry, elapse: Elapse
    ) -> None:
        """A crashed worker stops heartbeating and drops out of the registry."""
        await registry.put(instance("w-1"), ttl_ms=100)
        await registry.put(instance("w-2"), ttl_ms=TTL_MS)
        await elapse(250)

        assert await registry.get("w-1") is None
        assert await registry.list() == [instance("w-2")]
        assert await registry.list() == [instance("w-2")]

    async def test_a_heartbeat_put_extends_the_ttl(
        self, registry: WorkerRegistry, elapse: Elapse
    ) -> None:
        await registry.put(instance(beat=0), ttl_ms=300)
        await elapse(200)
        await registry.put(instance(beat=200), ttl_ms=300)
        await elapse(200)

        assert await registry.get("w-1") == instance(beat=200)
        assert await registry.list() == [instance(beat=200)]

    async def test_an_expired_instance_that_registers_again_is_listed(
        self, registry: WorkerRegistry, elapse: Elapse
    ) -> None:
        await registry.put(instance(), ttl_ms=100)
        await elapse(250)
        assert await registry.list() == []

        await registry.put(instance(status="starting"), ttl_ms=TTL_MS)

        assert await registry.list() == [instance(status="starting")]

    @pytest.mark.parametrize("ttl_ms", [0, -5])
    async def test_a_ttl_must_be_positive(self, registry: WorkerRegistry, ttl_ms: int) -> None:
        with pytest.raises(ValueError, match="positive"):
            await registry.put(instance(), ttl_ms=ttl_ms)
        assert await registry.get("w-1") is None


class TestMemoryWorkerRegistry(WorkerRegistryContract):
    @pytest.fixture
    def registry(self, clock: FakeClock) -> WorkerRegistry:
        return MemoryWorkerRegistry(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class RedisWorkerRegistryContract(WorkerRegistryContract):
    """The shared contract plus the key layout: a record with a TTL and a pruned id set."""

    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def registry(self, client: redis.Redis, keys: RedisKeys) -> WorkerRegistry:
        return RedisWorkerRegistry(client, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def test_the_record_is_a_key_with_a_ttl_and_its_id_is_in_the_set(
        self, registry: WorkerRegistry, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await registry.put(instance(), ttl_ms=TTL_MS)

        assert 0 < await client.pttl(keys.worker("w-1")) <= TTL_MS
        assert await client.smembers(keys.workers()) in ({b"w-1"}, {"w-1"})

    async def test_list_prunes_ids_whose_record_expired(
        self,
        registry: WorkerRegistry,
        client: redis.Redis,
        keys: RedisKeys,
        elapse: Elapse,
    ) -> None:
        await registry.put(instance("w-1"), ttl_ms=100)
        await registry.put(instance("w-2"), ttl_ms=TTL_MS)
        await elapse(250)

        assert await registry.list() == [instance("w-2")]

        assert await client.smembers(keys.workers()) in ({b"w-2"}, {"w-2"})

    async def test_remove_takes_the_id_out_of_the_set(
        self, registry: WorkerRegistry, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await registry.put(instance(), ttl_ms=TTL_MS)

        await registry.remove("w-1")

        assert await client.exists(keys.worker("w-1"), keys.workers()) == 0


class TestFakeRedisWorkerRegistry(RedisWorkerRegistryContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisWorkerRegistry(RedisWorkerRegistryContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
