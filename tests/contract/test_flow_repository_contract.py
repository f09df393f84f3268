"""FlowRepository contract (E1), run against every adapter family."""

from __future__ import annotations

import pytest
import redis.asyncio as redis
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.sqlalchemy import schema as sql_schema
from plaita.adapters.sqlalchemy.flows import SqlFlowRepository
from plaita.application.ports import FlowRepository
from plaita.domain.flow import Flow

from .sql_fixtures import PostgresEngine, SqliteEngine


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


class SqlFlows(FlowRepositoryContract):
    @pytest.fixture
    def flows(self, engine: AsyncEngine) -> FlowRepository:
        return SqlFlowRepository(engine)

    async def test_a_definition_is_stored_with_its_fingerprint_beside_the_latest_pointer(
        self, flows: FlowRepository, engine: AsyncEngine
    ) -> None:
        await flows.put(flow(version="1"))
        await flows.put(flow(version="2", handler="shop:charge_v2"))

        async with engine.connect() as connection:
            stored = (await connection.execute(sa.select(sql_schema.flows))).all()
            latest = (await connection.execute(sa.select(sql_schema.flow_latest))).all()
        assert sorted((row.version, row.fingerprint) for row in stored) == [
            ("1", flow(version="1").fingerprint),
            ("2", flow(version="2", handler="shop:charge_v2").fingerprint),
        ]
        assert all(row.created_at is not None for row in stored)
        assert [(row.flow_id, row.version) for row in latest] == [("orders", "2")]


class TestSqliteFlowRepository(SqliteEngine, SqlFlows):
    pass


class TestPostgresFlowRepository(PostgresEngine, SqlFlows):
    pass
