"""FlowRepository contract (E1), run against every adapter family."""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.application.ports import FlowRepository
from plaita.domain.flow import Flow


def flow(flow_id: str = "orders", version: str = "1", handler: str = "shop:charge") -> Flow:
    return Flow.from_document(
        {
            "flow_id": flow_id,
            "version": version,
            "start": "charge",
            "nodes": [
                {
                    "id": "charge",
                    "type": "task",
                    "handler": handler,
                    "params": {"amount": "${input.amount}"},
                    "retryTimes": 2,
                    "next": "done",
                },
                {"id": "done", "type": "end"},
            ],
        }
    )


class FlowRepositoryContract:
    @pytest.fixture
    def flows(self) -> FlowRepository:
        raise NotImplementedError

    async def test_put_then_get_the_latest(self, flows: FlowRepository) -> None:
        stored = flow()
        await flows.put(stored)

        found = await flows.get("orders")
        assert found is not None
        assert found.to_document() == stored.to_document()
        assert found.fingerprint == stored.fingerprint

    async def test_latest_follows_the_last_put_and_old_versions_stay(
        self, flows: FlowRepository
    ) -> None:
        await flows.put(flow(version="1", handler="shop:charge"))
        await flows.put(flow(version="2", handler="shop:charge_v2"))

        latest = await flows.get("orders")
        first = await flows.get("orders", "1")
        assert latest is not None and latest.version == "2"
        assert first is not None and first.fingerprint == flow(version="1").fingerprint

    async def test_putting_an_older_version_again_makes_it_the_latest(
        self, flows: FlowRepository
    ) -> None:
        await flows.put(flow(version="1"))
        await flows.put(flow(version="2"))
        await flows.put(flow(version="1"))

        latest = await flows.get("orders")
        assert latest is not None and latest.version == "1"

    async def test_unknown_flow_or_version_is_none(self, flows: FlowRepository) -> None:
        await flows.put(flow())

        assert await flows.get("nobody") is None
        assert await flows.get("nobody", "1") is None
        assert await flows.get("orders", "9") is None

    async def test_list_ids_is_sorted_and_counts_each_flow_once(
        self, flows: FlowRepository
    ) -> None:
        assert list(await flows.list_ids()) == []
        await flows.put(flow("shipping"))
        await flows.put(flow("billing:eu"))
        await flows.put(flow("shipping", version="2"))

        assert list(await flows.list_ids()) == ["billing:eu", "shipping"]


class TestMemoryFlowRepository(FlowRepositoryContract):
    @pytest.fixture
    def flows(self) -> FlowRepository:
        return MemoryFlowRepository()


class TestFakeRedisFlowRepository(FlowRepositoryContract):
    @pytest.fixture
    def flows(self, fake_redis: redis.Redis, keys: RedisKeys) -> FlowRepository:
        return RedisFlowRepository(fake_redis, keys)


@pytest.mark.redis
class TestRedisFlowRepository(FlowRepositoryContract):
    @pytest.fixture
    def flows(self, real_redis: redis.Redis, keys: RedisKeys) -> FlowRepository:
        return RedisFlowRepository(real_redis, keys)
