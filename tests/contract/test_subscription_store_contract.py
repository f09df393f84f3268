"""SubscriptionStore contract (V1, V2), run against every adapter family."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.application.ports import SubscriptionStore
from plaita.domain.events import EventSubscription


def subscription(
    subscription_id: str = "sub:x:1:wait",
    event_type: str = "payment.received",
    created_at_ms: int = 1_760_000_000_000,
) -> EventSubscription:
    return EventSubscription(
        subscription_id=subscription_id,
        event_type=event_type,
        execution_id="x:1",
        flow_id="orders",
        node_id="wait",
        created_at_ms=created_at_ms,
        correlation_id="order-7",
        filter_condition={"currency": "EUR", "amount": 12.5},
        tenant_id="acme",
    )


def ids(found: object) -> list[str]:
    return [s.subscription_id for s in found]  # type: ignore[attr-defined]


class SubscriptionStoreContract:
    @pytest.fixture
    def subscriptions(self) -> SubscriptionStore:
        raise NotImplementedError

    async def test_add_then_get_round_trips_every_field(
        self, subscriptions: SubscriptionStore
    ) -> None:
        added = subscription()
        await subscriptions.add(added)

        assert await subscriptions.get("sub:x:1:wait") == added

    async def test_get_of_an_unknown_id_is_none(self, subscriptions: SubscriptionStore) -> None:
        assert await subscriptions.get("sub:none") is None

    async def test_find_returns_the_subscriptions_of_one_type_oldest_first(
        self, subscriptions: SubscriptionStore
    ) -> None:
        await subscriptions.add(subscription("sub:b", created_at_ms=2))
        await subscriptions.add(subscription("sub:a", created_at_ms=3))
        await subscriptions.add(subscription("sub:c", created_at_ms=1))
        await subscriptions.add(subscription("sub:other", event_type="payment.refunded"))

        assert ids(await subscriptions.find("payment.received")) == ["sub:c", "sub:b", "sub:a"]
        assert ids(await subscriptions.find("payment.refunded")) == ["sub:other"]
        assert list(await subscriptions.find("payment")) == []

    async def test_remove_deletes_the_record_and_its_index_entry(
        self, subscriptions: SubscriptionStore
    ) -> None:
        await subscriptions.add(subscription("sub:x:1:wait"))
        await subscriptions.add(subscription("sub:x:2:wait"))

        assert await subscriptions.remove("sub:x:1:wait") is True

        assert await subscriptions.get("sub:x:1:wait") is None
        assert ids(await subscriptions.find("payment.received")) == ["sub:x:2:wait"]
        assert await subscriptions.remove("sub:x:1:wait") is False

    async def test_remove_of_an_unknown_id_is_false(self, subscriptions: SubscriptionStore) -> None:
        assert await subscriptions.remove("sub:none") is False

    async def test_re_adding_under_another_type_moves_it(
        self, subscriptions: SubscriptionStore
    ) -> None:
        await subscriptions.add(subscription("sub:1", event_type="payment.received"))
        await subscriptions.add(subscription("sub:1", event_type="payment.refunded"))

        assert list(await subscriptions.find("payment.received")) == []
        assert ids(await subscriptions.find("payment.refunded")) == ["sub:1"]


class TestMemorySubscriptionStore(SubscriptionStoreContract):
    @pytest.fixture
    def subscriptions(self) -> SubscriptionStore:
        return MemorySubscriptionStore()


class RedisIndexChecks:
    """Redis only: an index entry whose record vanished is skipped, not an error."""

    async def test_find_skips_a_dangling_index_entry(
        self, subscriptions: SubscriptionStore, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        await subscriptions.add(subscription("sub:kept"))
        # The type index is a sorted set by created_at_ms since V7 (listing reads it in order).
        await redis_client.zadd(keys.subscriptions_by_type("payment.received"), {"sub:gone": 0})

        assert ids(await subscriptions.find("payment.received")) == ["sub:kept"]

    async def test_an_add_between_anothers_two_steps_keeps_its_entries(
        self, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        """A record and its index entries live in different hash slots, so an add is two
        steps: the record, then the index entries. Another add of the same id lands between
        them (the record moves refunded → received meanwhile): the first add's step 2 drops
        the id from the index of the record it replaced — the one the other add just wrote —
        and, finding a record it did not write, indexes that one again."""
        plain = RedisSubscriptionStore(redis_client, keys)
        await plain.add(subscription("sub:1", event_type="payment.received"))
        other = subscription("sub:1", event_type="payment.received", created_at_ms=7)

        async def other_add_in_between() -> None:
            await plain.add(other)

        interleaved = RedisSubscriptionStore(
            Between(redis_client, "set", other_add_in_between), keys
        )
        await interleaved.add(subscription("sub:1", event_type="payment.refunded"))

        assert await plain.get("sub:1") == other
        assert ids(await plain.find("payment.received")) == ["sub:1"]
        # The entry the first add made is stale (its record moved on): skipped.
        assert list(await plain.find("payment.refunded")) == []

    async def test_an_add_between_a_removes_two_steps_keeps_its_entries(
        self, redis_client: redis.Redis, keys: RedisKeys
    ) -> None:
        """A remove deletes the record, then the index entries; an add of the same id lands
        between the two: the remove's step 2 drops the entries the add just made, then finds
        the add's record and indexes it again."""
        plain = RedisSubscriptionStore(redis_client, keys)
        await plain.add(subscription("sub:1"))
        again = subscription("sub:1", created_at_ms=9)

        async def add_in_between() -> None:
            await plain.add(again)

        interleaved = RedisSubscriptionStore(Between(redis_client, "getdel", add_in_between), keys)
        assert await interleaved.remove("sub:1") is True

        assert await plain.get("sub:1") == again
        assert ids(await plain.find("payment.received")) == ["sub:1"]
        assert ids(await plain.find_for_event("payment.received", "order-7")) == ["sub:1"]


class Between:
    """A client that runs ``meanwhile`` right after its first ``command`` call: another
    writer's whole operation between the two steps of the store's own."""

    def __init__(self, client: redis.Redis, command: str, meanwhile: Any) -> None:
        self._client = client
        self._command = command
        self._meanwhile = meanwhile

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name != self._command or self._meanwhile is None:
            return attribute

        async def then_meanwhile(*args: Any, **kwargs: Any) -> Any:
            reply = await attribute(*args, **kwargs)
            meanwhile, self._meanwhile = self._meanwhile, None
            await meanwhile()
            return reply

        return then_meanwhile


class TestFakeRedisSubscriptionStore(SubscriptionStoreContract, RedisIndexChecks):
    @pytest.fixture
    def redis_client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis

    @pytest.fixture
    def subscriptions(self, fake_redis: redis.Redis, keys: RedisKeys) -> SubscriptionStore:
        return RedisSubscriptionStore(fake_redis, keys)


@pytest.mark.redis
class TestRedisSubscriptionStore(SubscriptionStoreContract, RedisIndexChecks):
    @pytest.fixture
    def redis_client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis

    @pytest.fixture
    def subscriptions(self, real_redis: redis.Redis, keys: RedisKeys) -> SubscriptionStore:
        return RedisSubscriptionStore(real_redis, keys)
