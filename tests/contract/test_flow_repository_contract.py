"""FlowRepository contract (E1, S2, W24), run against every adapter family.

Definitions belong to an owner — a tenant, or the deployment (``SHARED``) — and owners never
see each other's. A registered (owner, flow_id, version) is immutable: ``put_if_absent``
writes only a version not stored yet, and makes it the owner's latest only when the flow has
none (atomically), and of concurrent puts of one version exactly one writes. Every other move
of the latest is ``move_latest``'s compare-and-set, so concurrent registrations through the
catalog of different versions end with the highest as the latest on every backend.
"""

from __future__ import annotations

import asyncio

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
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED, FlowOwner
from plaita.domain.flow_versions import is_higher

from .conftest import FakeClock
from .sql_fixtures import PostgresEngine, SqliteEngine

ACME = FlowOwner.tenant("acme")
DEFAULT = FlowOwner.tenant("default")


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
        assert await flows.put_if_absent(stored, owner=SHARED) is None

        found = await flows.get("orders", owner=SHARED)
        assert found is not None
        assert found.to_document() == stored.to_document()
        assert found.fingerprint == stored.fingerprint

    async def test_the_first_version_stored_is_the_latest_and_later_puts_leave_it(
        self, flows: FlowRepository
    ) -> None:
        """Which later version becomes the latest is the catalog's decision (move_latest)."""
        assert await flows.latest_version("orders", owner=SHARED) is None
        await flows.put_if_absent(flow(version="2", handler="shop:charge_v2"), owner=SHARED)
        await flows.put_if_absent(flow(version="1", handler="shop:charge"), owner=SHARED)
        await flows.put_if_absent(flow(version="3", handler="shop:charge_v3"), owner=SHARED)

        latest = await flows.get("orders", owner=SHARED)
        first = await flows.get("orders", "1", owner=SHARED)
        assert await flows.latest_version("orders", owner=SHARED) == "2"
        assert latest is not None and latest.version == "2"
        assert first is not None and first.fingerprint == flow(version="1").fingerprint

    async def test_putting_a_stored_version_again_writes_nothing_and_returns_it(
        self, flows: FlowRepository
    ) -> None:
        """S2: a version is immutable, and a put of a stored one never moves the latest."""
        await flows.put_if_absent(flow(version="1"), owner=SHARED)
        await flows.put_if_absent(flow(version="2"), owner=SHARED)
        assert await flows.move_latest("orders", "2", owner=SHARED, expected="1")

        same = await flows.put_if_absent(flow(version="1"), owner=SHARED)
        other = await flows.put_if_absent(flow(version="1", handler="evil:swap"), owner=SHARED)

        assert same is not None and same.fingerprint == flow(version="1").fingerprint
        assert other is not None and other.fingerprint == flow(version="1").fingerprint
        kept = await flows.get("orders", "1", owner=SHARED)
        latest = await flows.get("orders", owner=SHARED)
        assert kept is not None and kept.fingerprint == flow(version="1").fingerprint
        assert latest is not None and latest.version == "2"

    # --- the latest pointer's compare-and-set -----------------------------------------------

    async def test_move_latest_moves_from_the_expected_version_only(
        self, flows: FlowRepository
    ) -> None:
        for version in ("1", "2", "3"):
            await flows.put_if_absent(flow(version=version), owner=SHARED)

        assert await flows.move_latest("orders", "3", owner=SHARED, expected="1")
        assert await flows.latest_version("orders", owner=SHARED) == "3"
        found = await flows.get("orders", owner=SHARED)
        assert found is not None and found.version == "3"

        # Stale: the pointer names 3 now, not 1.
        assert not await flows.move_latest("orders", "2", owner=SHARED, expected="1")
        # None expects no latest at all; the flow has one.
        assert not await flows.move_latest("orders", "2", owner=SHARED, expected=None)
        assert await flows.latest_version("orders", owner=SHARED) == "3"

        # Back to an older version is a move like any other: the rule is the caller's.
        assert await flows.move_latest("orders", "1", owner=SHARED, expected="3")
        assert await flows.latest_version("orders", owner=SHARED) == "1"

    async def test_move_latest_never_points_at_a_version_not_stored(
        self, flows: FlowRepository
    ) -> None:
        await flows.put_if_absent(flow(version="1"), owner=ACME)

        assert not await flows.move_latest("orders", "9", owner=ACME, expected="1")
        assert not await flows.move_latest("nobody", "1", owner=ACME, expected=None)
        assert await flows.latest_version("orders", owner=ACME) == "1"
        assert await flows.latest_version("nobody", owner=ACME) is None
        assert list(await flows.list_ids(owner=ACME)) == ["orders"]

    async def test_move_latest_is_one_owners(self, flows: FlowRepository) -> None:
        """W24: another owner's pointer, and its versions, are not this owner's."""
        for owner in (SHARED, ACME):
            await flows.put_if_absent(flow(version="1"), owner=owner)
        await flows.put_if_absent(flow(version="2"), owner=SHARED)

        assert not await flows.move_latest("orders", "2", owner=ACME, expected="1")
        assert await flows.move_latest("orders", "2", owner=SHARED, expected="1")
        assert await flows.latest_version("orders", owner=ACME) == "1"
        assert await flows.latest_version("orders", owner=DEFAULT) is None

    async def test_of_concurrent_moves_from_one_version_exactly_one_wins(
        self, flows: FlowRepository
    ) -> None:
        versions = [str(n) for n in range(1, 9)]
        for version in versions:
            await flows.put_if_absent(flow(version=version), owner=ACME)

        moved = await asyncio.gather(
            *(flows.move_latest("orders", v, owner=ACME, expected="1") for v in versions[1:])
        )

        winners = [v for v, won in zip(versions[1:], moved, strict=True) if won]
        assert len(winners) == 1
        assert await flows.latest_version("orders", owner=ACME) == winners[0]

    async def test_concurrent_registrations_of_different_versions_end_at_the_highest(
        self, flows: FlowRepository, clock: FakeClock
    ) -> None:
        """Through the catalog (read, decide, compare-and-set, retry): whatever the order in
        which the registrations land, the highest version by the version order is the latest."""
        versions = ["3", "10", "1", "9", "2", "1.10", "1.9", "4"]
        catalogs = [FlowCatalog(flows, None, clock=clock, cache_size=0) for _ in versions]
        # Scripts loaded and connections open first, as in any running process: redis-py's
        # cluster client can run a script twice when many first calls race its NOSCRIPT
        # reload on connections still opening (seen with redis-py 8.1).
        for warm_version in ("1", "2"):
            await catalogs[0].register(flow(flow_id="warm_up", version=warm_version), owner=ACME)

        registered = await asyncio.gather(
            *(
                catalog.register(flow(version=version), owner=ACME)
                for catalog, version in zip(catalogs, versions, strict=True)
            )
        )

        assert await flows.latest_version("orders", owner=ACME) == "10"
        latest = await flows.get("orders", owner=ACME)
        assert latest is not None and latest.version == "10"
        assert all(r.created for r in registered)
        by_version = {r.flow.version: r for r in registered}
        assert by_version["10"].is_latest
        for registration in registered:
            # One that did not become the latest saw a higher one there.
            if not registration.is_latest:
                assert is_higher(registration.latest.latest, registration.flow.version)

    async def test_owners_keep_their_own_definitions_of_one_version(
        self, flows: FlowRepository
    ) -> None:
        """W24: the deployment, the default tenant and acme each have their own catalogue."""
        documents = {SHARED: "shop:charge", DEFAULT: "shop:default", ACME: "shop:acme"}
        for owner, handler in documents.items():
            assert await flows.put_if_absent(flow(handler=handler), owner=owner) is None

        for owner, handler in documents.items():
            expected = flow(handler=handler).fingerprint
            latest = await flows.get("orders", owner=owner)
            pinned = await flows.get("orders", "1", owner=owner)
            assert latest is not None and latest.fingerprint == expected, owner
            assert pinned is not None and pinned.fingerprint == expected, owner

    async def test_another_owners_flow_is_not_there(self, flows: FlowRepository) -> None:
        await flows.put_if_absent(flow(), owner=ACME)

        assert await flows.get("orders", owner=SHARED) is None
        assert await flows.get("orders", "1", owner=DEFAULT) is None
        assert list(await flows.list_ids(owner=SHARED)) == []
        assert list(await flows.list_ids(owner=DEFAULT)) == []

    async def test_unknown_flow_or_version_is_none(self, flows: FlowRepository) -> None:
        await flows.put_if_absent(flow(), owner=SHARED)

        assert await flows.get("nobody", owner=SHARED) is None
        assert await flows.get("nobody", "1", owner=SHARED) is None
        assert await flows.get("orders", "9", owner=SHARED) is None

    async def test_list_ids_is_sorted_and_counts_each_flow_once(
        self, flows: FlowRepository
    ) -> None:
        assert list(await flows.list_ids(owner=SHARED)) == []
        await flows.put_if_absent(flow("shipping"), owner=SHARED)
        await flows.put_if_absent(flow("billing:eu"), owner=SHARED)
        await flows.put_if_absent(flow("shipping", version="2"), owner=SHARED)
        await flows.put_if_absent(flow("private"), owner=ACME)

        assert list(await flows.list_ids(owner=SHARED)) == ["billing:eu", "shipping"]
        assert list(await flows.list_ids(owner=ACME)) == ["private"]

    async def test_versions_lists_every_stored_version_of_one_owners_flow(
        self, flows: FlowRepository
    ) -> None:
        """The console's flows page lists a flow's versions (C2)."""
        assert list(await flows.versions("orders", owner=SHARED)) == []
        for version in ("2", "10", "1"):
            await flows.put_if_absent(flow(version=version), owner=SHARED)
        await flows.put_if_absent(flow(version="2"), owner=SHARED)
        await flows.put_if_absent(flow(version="7"), owner=ACME)
        await flows.put_if_absent(flow("shipping", version="3"), owner=SHARED)

        assert list(await flows.versions("orders", owner=SHARED)) == ["1", "10", "2"]
        assert list(await flows.versions("orders", owner=ACME)) == ["7"]
        assert list(await flows.versions("missing", owner=SHARED)) == []

    async def test_of_concurrent_puts_of_one_version_exactly_one_is_stored(
        self, flows: FlowRepository
    ) -> None:
        """S2: two registrations racing for one version never both win, on any backend."""
        rivals = [flow(handler=f"shop:rival_{n}") for n in range(8)]

        answers = await asyncio.gather(*(flows.put_if_absent(f, owner=ACME) for f in rivals))

        winners = [rival for rival, answer in zip(rivals, answers, strict=True) if answer is None]
        assert len(winners) == 1
        stored = await flows.get("orders", "1", owner=ACME)
        assert stored is not None and stored.fingerprint == winners[0].fingerprint
        assert {a.fingerprint for a in answers if a is not None} == {winners[0].fingerprint}
        latest = await flows.get("orders", owner=ACME)
        assert latest is not None and latest.fingerprint == winners[0].fingerprint


class TestMemoryFlowRepository(FlowRepositoryContract):
    @pytest.fixture
    def flows(self) -> FlowRepository:
        return MemoryFlowRepository()


class RedisFlows(FlowRepositoryContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def flows(self, client: redis.Redis, keys: RedisKeys) -> FlowRepository:
        return RedisFlowRepository(client, keys)

    async def test_a_tenants_definitions_live_in_its_namespace_and_shared_ones_where_they_were(
        self, flows: FlowRepository, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """ADR 0011: shared definitions keep the keys of deployments before tenants owned
        flows; the default tenant's own never land on them."""
        await flows.put_if_absent(flow(), owner=SHARED)
        await flows.put_if_absent(flow(handler="shop:default"), owner=DEFAULT)
        await flows.put_if_absent(flow(handler="shop:acme"), owner=ACME)

        ns = keys.namespace
        assert (
            await client.exists(
                f"{ns}:flow:{{orders}}:v:1", f"{ns}:flow:{{orders}}:latest", f"{ns}:flows"
            )
            == 3
        )
        assert (
            await client.exists(
                f"{ns}:tenant-flow:{{orders}}:v:1",
                f"{ns}:acme:tenant-flow:{{orders}}:v:1",
                f"{ns}:acme:tenant-flow:{{orders}}:latest",
                f"{ns}:acme:tenant-flows",
            )
            == 4
        )


class TestFakeRedisFlowRepository(RedisFlows):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisFlowRepository(RedisFlows):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


class SqlFlows(FlowRepositoryContract):
    @pytest.fixture
    def flows(self, engine: AsyncEngine) -> FlowRepository:
        return SqlFlowRepository(engine)

    async def test_a_definition_is_stored_with_its_owner_and_fingerprint_beside_the_latest(
        self, flows: FlowRepository, engine: AsyncEngine
    ) -> None:
        await flows.put_if_absent(flow(version="1"), owner=SHARED)
        await flows.put_if_absent(flow(version="2", handler="shop:charge_v2"), owner=SHARED)
        await flows.put_if_absent(flow(version="1"), owner=ACME)

        async with engine.connect() as connection:
            stored = (await connection.execute(sa.select(sql_schema.flows))).all()
            latest = (await connection.execute(sa.select(sql_schema.flow_latest))).all()
        assert sorted((row.owner, row.version, row.fingerprint) for row in stored) == [
            ("*", "1", flow(version="1").fingerprint),
            ("*", "2", flow(version="2", handler="shop:charge_v2").fingerprint),
            ("acme", "1", flow(version="1").fingerprint),
        ]
        assert all(row.created_at is not None for row in stored)
        assert sorted((row.owner, row.flow_id, row.version) for row in latest) == [
            ("*", "orders", "1"),
            ("acme", "orders", "1"),
        ]


class TestSqliteFlowRepository(SqliteEngine, SqlFlows):
    pass


class TestPostgresFlowRepository(PostgresEngine, SqlFlows):
    pass
