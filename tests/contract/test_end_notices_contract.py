"""EndNotices contract (application/ports/end_notices.py): the memory twin and Redis pub/sub
(single node and cluster). A watch hears every notice of its execution announced after it
opened, and no other; notices are scoped to the tenant; a dropped subscription wakes its
watchers (who re-read their state) and comes back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from plaita.adapters.memory.end_notices import MemoryEndNotices
from plaita.adapters.redis.end_notices import RedisEndNotices
from plaita.adapters.redis.keys import RedisKeys
from plaita.application.ports import EndNotices
from plaita.application.tenancy import tenant_scope

from .conftest import real_redis_client

pytestmark = pytest.mark.timeout(30)

#: Long enough for a notice to cross a loopback Redis, short enough to keep a "no" quick.
HEARD_S = 5.0
NOT_HEARD_S = 0.3


class EndNoticesContract:
    @pytest.fixture
    def notices(self) -> EndNotices:
        raise NotImplementedError

    @pytest.fixture
    def announcer(self, notices: EndNotices) -> EndNotices:
        """Where the worker announces: the same object, or another process's."""
        return notices

    async def test_a_watch_hears_its_execution_end(
        self, notices: EndNotices, announcer: EndNotices
    ) -> None:
        async with notices.watch("e-1") as watch:
            await announcer.announce("e-1")
            assert await watch.wait(HEARD_S) is True

    async def test_a_notice_before_the_watch_is_not_heard(
        self, notices: EndNotices, announcer: EndNotices
    ) -> None:
        await announcer.announce("e-1")
        async with notices.watch("e-1") as watch:
            assert await watch.wait(NOT_HEARD_S) is False

    async def test_another_executions_notice_does_not_wake(
        self, notices: EndNotices, announcer: EndNotices
    ) -> None:
        async with notices.watch("e-1") as watch:
            await announcer.announce("e-2")
            assert await watch.wait(NOT_HEARD_S) is False
            await announcer.announce("e-1")
            assert await watch.wait(HEARD_S) is True

    async def test_notices_are_scoped_to_the_tenant(
        self, notices: EndNotices, announcer: EndNotices
    ) -> None:
        async with notices.watch("e-1") as watch:
            with tenant_scope("other"):
                await announcer.announce("e-1")
            assert await watch.wait(NOT_HEARD_S) is False

    async def test_every_watch_of_one_execution_hears_it(
        self, notices: EndNotices, announcer: EndNotices
    ) -> None:
        async with notices.watch("e-1") as first, notices.watch("e-1") as second:
            await announcer.announce("e-1")
            assert await first.wait(HEARD_S) is True
            assert await second.wait(HEARD_S) is True

    async def test_a_notice_nobody_watches_any_more_wakes_nothing_and_fails_nothing(
        self, notices: EndNotices, announcer: EndNotices
    ) -> None:
        async with notices.watch("e-1"):
            pass
        await announcer.announce("e-1")
        # A watch opened now may hear it late (a wake-up more is allowed: the waiter only
        # re-reads its state), and hears what comes after it opened.
        async with notices.watch("e-1") as watch:
            await announcer.announce("e-1")
            assert await watch.wait(HEARD_S) is True


class TestMemoryEndNotices(EndNoticesContract):
    @pytest.fixture
    def notices(self) -> EndNotices:
        return MemoryEndNotices()

    async def test_an_announcement_from_another_threads_loop_wakes_the_watch(
        self, notices: EndNotices
    ) -> None:
        async with notices.watch("e-1") as watch:

            def announce_elsewhere() -> None:
                with tenant_scope("default"):
                    asyncio.run(notices.announce("e-1"))

            thread = threading.Thread(target=announce_elsewhere)
            thread.start()
            assert await watch.wait(HEARD_S) is True
            thread.join(5)


class TestRedisEndNotices(EndNoticesContract):
    @pytest.fixture
    async def clients(self, redis_topology: str) -> AsyncIterator[tuple[Any, Any]]:
        listening = real_redis_client(redis_topology, decode_responses=True)
        announcing = real_redis_client(redis_topology, decode_responses=False)
        yield listening, announcing
        await listening.aclose()
        await announcing.aclose()

    @pytest.fixture
    async def notices(self, clients: tuple[Any, Any], keys: RedisKeys) -> AsyncIterator[Any]:
        notices = RedisEndNotices(clients[0], keys)
        yield notices
        await notices.aclose()

    @pytest.fixture
    def announcer(self, clients: tuple[Any, Any], keys: RedisKeys) -> EndNotices:
        """Another process's notices: another client, the same namespace."""
        return RedisEndNotices(clients[1], keys)

    async def test_a_dropped_subscription_wakes_the_watch_and_comes_back(
        self, notices: RedisEndNotices, announcer: EndNotices, redis_topology: str
    ) -> None:
        async with notices.watch("e-1") as watch:
            admin: Any = real_redis_client(redis_topology, decode_responses=True)
            try:
                if redis_topology == "node":
                    await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
                else:
                    await admin.initialize()
                    for node in admin.get_nodes():
                        await admin.execute_command(
                            "CLIENT", "KILL", "TYPE", "pubsub", target_nodes=node
                        )
            finally:
                await admin.aclose()
            # Woken: whatever was announced meanwhile may be lost, so the waiter re-reads.
            assert await watch.wait(HEARD_S) is True
            async with asyncio.timeout(10):
                while True:  # the subscription is back once a fresh notice is heard
                    await announcer.announce("e-1")
                    if await watch.wait(0.5):
                        break

    async def test_close_wakes_the_watches(self, notices: RedisEndNotices) -> None:
        async with notices.watch("e-1") as watch:
            await notices.aclose()
            assert await watch.wait(HEARD_S) is True
