"""Inbox contract (V6) on memory, fakeredis (bytes and str) and real Redis."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.inbox import MemoryInbox
from plaita.adapters.redis.inbox import RedisInbox
from plaita.adapters.redis.keys import RedisKeys
from plaita.application.ports import Clock, Inbox
from plaita.domain.events import Event, EventSubscription, pick_inbox_event

Elapse = Callable[[int], Awaitable[None]]
NOW_MS = 1_760_000_000_000


def event(event_id: str, *, correlation: str | None = "order:7", tenant: str = "default") -> Event:
    return Event(
        event_id=event_id,
        event_type="approval_decision",
        timestamp_ms=NOW_MS + int(event_id.rsplit("-", 1)[-1]),
        data={"approved": True},
        correlation_id=correlation,
        tenant_id=tenant,
    )


def wait(subscription_id: str, execution_id: str = "x:1") -> EventSubscription:
    return EventSubscription(
        subscription_id=subscription_id,
        event_type="approval_decision",
        execution_id=execution_id,
        flow_id="approval",
        node_id="wait",
        created_at_ms=NOW_MS,
        correlation_id="order:7",
    )


class InboxContract:
    @pytest.fixture
    def inbox(self) -> Inbox:
        raise NotImplementedError

    async def test_an_event_published_before_the_wait_is_waiting_in_the_inbox(
        self, inbox: Inbox
    ) -> None:
        await inbox.add(event("ev:1-1"))
        await inbox.add(event("ev:1-2"))

        entries = await inbox.entries("default", "order:7", "x:1")

        assert [(e.event.event_id, e.taken_by) for e in entries] == [
            ("ev:1-1", None),
            ("ev:1-2", None),
        ]
        assert entries[0].event == event("ev:1-1")

    async def test_events_without_a_correlation_are_not_kept(self, inbox: Inbox) -> None:
        await inbox.add(event("ev-1", correlation=None))
        assert await inbox.entries("default", "order:7", "x:1") == []

    async def test_inboxes_are_per_tenant(self, inbox: Inbox) -> None:
        await inbox.add(event("ev-1", tenant="acme"))
        assert await inbox.entries("default", "order:7", "x:1") == []
        assert [e.event.event_id for e in await inbox.entries("acme", "order:7", "x:1")] == ["ev-1"]

    async def test_the_first_take_wins_and_is_reported_to_every_later_taker(
        self, inbox: Inbox
    ) -> None:
        await inbox.add(event("ev-1"))

        assert await inbox.take("default", "order:7", "x:1", "ev-1", "sub-a") == "sub-a"
        assert await inbox.take("default", "order:7", "x:1", "ev-1", "sub-b") == "sub-a"
        assert await inbox.take("default", "order:7", "x:1", "ev-1", "sub-a") == "sub-a"

    async def test_takes_are_per_execution(self, inbox: Inbox) -> None:
        """One broadcast event may resume a wait of each execution, once each."""
        await inbox.add(event("ev-1"))
        await inbox.take("default", "order:7", "x:1", "ev-1", "sub-a")

        [mine] = await inbox.entries("default", "order:7", "x:1")
        [theirs] = await inbox.entries("default", "order:7", "x:2")

        assert (mine.taken_by, theirs.taken_by) == ("sub-a", None)
        assert await inbox.take("default", "order:7", "x:2", "ev-1", "sub-z") == "sub-z"

    async def test_a_later_wait_never_takes_an_event_an_earlier_wait_took(
        self, inbox: Inbox
    ) -> None:
        await inbox.add(event("ev-1"))
        await inbox.take("default", "order:7", "x:1", "ev-1", "first-wait")

        entries = await inbox.entries("default", "order:7", "x:1")

        assert pick_inbox_event(wait("later-wait"), entries) is None
        assert pick_inbox_event(wait("first-wait"), entries) == event("ev-1")

    async def test_ids_with_colons_and_separators_stay_apart(self, inbox: Inbox) -> None:
        await inbox.add(event("a:b-1"))
        await inbox.take("default", "order:7", "x:1:y", "a:b-1", "s:1")

        assert [e.taken_by for e in await inbox.entries("default", "order:7", "x:1:y")] == ["s:1"]
        assert [e.taken_by for e in await inbox.entries("default", "order:7", "x:1")] == [None]


class TestMemoryInbox(InboxContract):
    @pytest.fixture
    def inbox(self, clock: Clock) -> Inbox:
        return MemoryInbox(clock)

    async def test_the_newest_events_are_kept(self, clock: Clock) -> None:
        inbox = MemoryInbox(clock, max_entries=2)
        for n in range(1, 4):
            await inbox.add(event(f"ev-{n}"))
        kept = await inbox.entries("default", "order:7", "x:1")
        assert [e.event.event_id for e in kept] == ["ev-2", "ev-3"]

    async def test_the_inbox_expires_after_its_ttl(
        self, clock: Clock, advance_clock: Elapse
    ) -> None:
        inbox = MemoryInbox(clock, ttl_seconds=10)
        await inbox.add(event("ev-1"))
        await advance_clock(9_999)
        assert len(await inbox.entries("default", "order:7", "x:1")) == 1
        await advance_clock(1)
        assert await inbox.entries("default", "order:7", "x:1") == []


class RedisInboxChecks:
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    async def test_the_newest_events_are_kept(self, client: redis.Redis, keys: RedisKeys) -> None:
        inbox = RedisInbox(client, keys, max_entries=2)
        for n in range(1, 4):
            await inbox.add(event(f"ev-{n}"))
        kept = await inbox.entries("default", "order:7", "x:1")
        assert [e.event.event_id for e in kept] == ["ev-2", "ev-3"]

    async def test_ttls_only_extend(self, client: redis.Redis, keys: RedisKeys) -> None:
        long_lived = RedisInbox(client, keys, ttl_seconds=3600)
        short_lived = RedisInbox(client, keys, ttl_seconds=10)
        await long_lived.add(event("ev-1"))
        await long_lived.take("default", "order:7", "x:1", "ev-1", "s")

        await short_lived.add(event("ev-2"))
        await short_lived.take("default", "order:7", "x:1", "ev-2", "s")

        for key in (keys.inbox("default", "order:7"), keys.inbox_taken("default", "order:7")):
            assert 3_500_000 < await client.pttl(key) <= 3_600_000

    async def test_keys_live_in_the_tenants_namespace(
        self, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await RedisInbox(client, keys).add(event("ev-1", tenant="acme"))
        assert keys.inbox("acme", "order:7") == f"{keys.namespace}:acme:inbox:{{order:7}}"
        assert await client.llen(keys.inbox("acme", "order:7")) == 1


class TestFakeRedisInbox(RedisInboxChecks, InboxContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis

    @pytest.fixture
    def inbox(self, fake_redis: redis.Redis, keys: RedisKeys) -> Inbox:
        return RedisInbox(fake_redis, keys)


@pytest.mark.redis
class TestRedisInbox(RedisInboxChecks, InboxContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis

    @pytest.fixture
    def inbox(self, real_redis: redis.Redis, keys: RedisKeys) -> Inbox:
        return RedisInbox(real_redis, keys)
