"""HookStore contract (V10), run against memory, fakeredis, real Redis (node and cluster),
SQLite and PostgreSQL: one hook per name, added only when the name is free, read back whole
(its secret included: the store is where a stored secret lives), listed by name."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.hooks import MemoryHookStore
from plaita.adapters.redis.hooks import RedisHookStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.sqlalchemy.hooks import SqlHookStore
from plaita.application.ports import HookStore
from plaita.domain.hooks import HookDefinition, HookSecret, SecretKind, parse_hook

from .sql_fixtures import PostgresEngine, SqliteEngine


def hook(name: str = "payments", **fields: Any) -> HookDefinition:
    return parse_hook(
        {
            "name": name,
            "event_type": "payment.settled",
            "correlation_id_pointer": "/order/id",
            "secret": "whsec-0123456789abcdef",
            **fields,
        }
    )


class HookStoreContract:
    @pytest.fixture
    def hooks(self) -> HookStore:
        raise NotImplementedError

    async def test_an_added_hook_reads_back_whole(self, hooks: HookStore) -> None:
        added = hook(tenant="acme", data_pointer="/data", replay_window_seconds=60)
        assert await hooks.add(added) is True
        assert await hooks.get("payments") == added

    async def test_a_referenced_secret_is_kept_as_its_reference(self, hooks: HookStore) -> None:
        await hooks.add(hook(secret=None, secret_ref="env:PAYMENTS_SECRET"))
        stored = await hooks.get("payments")
        assert stored is not None
        assert stored.secret == HookSecret(SecretKind.ENV, "PAYMENTS_SECRET")

    async def test_a_taken_name_is_refused_and_the_first_hook_stays(self, hooks: HookStore) -> None:
        first = hook(event_type="first")
        assert await hooks.add(first) is True
        assert await hooks.add(hook(event_type="second", tenant="acme")) is False
        assert await hooks.get("payments") == first

    async def test_of_concurrent_adds_of_one_name_exactly_one_wins(self, hooks: HookStore) -> None:
        # A connection open first, as in any running process: redis-py's cluster client can
        # fail commands racing on a connection that is still opening (seen with redis-py 8.1).
        await hooks.get("warm-up")
        added = await asyncio.gather(*(hooks.add(hook(event_type=f"t{i}")) for i in range(8)))
        assert sorted(added) == [False] * 7 + [True]

    async def test_an_unknown_name_is_none(self, hooks: HookStore) -> None:
        assert await hooks.get("nope") is None

    async def test_hooks_are_listed_by_name(self, hooks: HookStore) -> None:
        for name in ("b-hook", "a:hook", "C.hook", "a-hook"):
            await hooks.add(hook(name))
        assert [h.name for h in await hooks.list()] == ["C.hook", "a-hook", "a:hook", "b-hook"]

    async def test_an_empty_store_lists_nothing(self, hooks: HookStore) -> None:
        assert list(await hooks.list()) == []

    async def test_remove_deletes_once_and_frees_the_name(self, hooks: HookStore) -> None:
        await hooks.add(hook())
        await hooks.add(hook("other"))
        assert await hooks.remove("payments") is True
        assert await hooks.remove("payments") is False
        assert await hooks.get("payments") is None
        assert [h.name for h in await hooks.list()] == ["other"]
        assert await hooks.add(hook(event_type="again")) is True

    async def test_removing_an_unknown_name_is_false(self, hooks: HookStore) -> None:
        assert await hooks.remove("nope") is False


class TestMemoryHookStore(HookStoreContract):
    @pytest.fixture
    def hooks(self) -> HookStore:
        return MemoryHookStore()


class TestFakeRedisHookStore(HookStoreContract):
    @pytest.fixture
    def hooks(self, fake_redis: redis.Redis, keys: RedisKeys) -> HookStore:
        return RedisHookStore(fake_redis, keys)


@pytest.mark.redis
class TestRedisHookStore(HookStoreContract):
    @pytest.fixture
    def hooks(self, real_redis: redis.Redis, keys: RedisKeys) -> HookStore:
        return RedisHookStore(real_redis, keys)


class SqlHooks(HookStoreContract):
    @pytest.fixture
    def hooks(self, engine: AsyncEngine) -> HookStore:
        return SqlHookStore(engine)


class TestSqliteHookStore(SqliteEngine, SqlHooks):
    pass


class TestPostgresHookStore(PostgresEngine, SqlHooks):
    pass
