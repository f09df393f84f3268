"""WaitingNotes contract: why an execution waits for room to run (flow control), kept beside
its checkpoint on memory, fakeredis and real Redis (node and cluster)."""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.waiting_notes import MemoryWaitingNotes
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.waiting_notes import RedisWaitingNotes
from plaita.application.ports import Clock, WaitingNotes
from plaita.application.tenancy import no_tenant_scope, tenant_scope
from plaita.domain.errors import TenantContextMissingError
from plaita.domain.flow_control import WAITING_NOTE_TTL_MS, Waiting, WaitReason

from .conftest import FakeClock

SLOTS_FULL = Waiting(
    reason=WaitReason.CONCURRENCY,
    since_ms=1_760_000_000_000,
    detail="2 of 2 slots of key 'acme' are held",
    key="orders:acme",
    holders=("x:1", "x:2"),
    limit=2,
)
NO_TOKEN = Waiting(
    reason=WaitReason.RATE_LIMIT,
    since_ms=1_760_000_000_100,
    detail="no token for key 'stripe' before its due time",
    key="stripe",
    due_ms=1_760_000_000_300,
)


class WaitingNotesContract:
    @pytest.fixture
    def notes(self) -> WaitingNotes:
        raise NotImplementedError

    async def test_a_note_is_read_back_whole(self, notes: WaitingNotes) -> None:
        await notes.note("x:3", SLOTS_FULL)

        assert await notes.get("x:3") == SLOTS_FULL

    async def test_a_new_note_replaces_the_old(self, notes: WaitingNotes) -> None:
        await notes.note("x:3", SLOTS_FULL)
        await notes.note("x:3", NO_TOKEN)

        assert await notes.get("x:3") == NO_TOKEN

    async def test_clear_forgets_it_and_clearing_nothing_is_fine(self, notes: WaitingNotes) -> None:
        await notes.note("x:3", SLOTS_FULL)
        await notes.clear("x:3")
        await notes.clear("x:never")

        assert await notes.get("x:3") is None

    async def test_get_many_returns_only_the_executions_with_a_note(
        self, notes: WaitingNotes
    ) -> None:
        await notes.note("x:3", SLOTS_FULL)
        await notes.note("x:4", NO_TOKEN)

        found = await notes.get_many(["x:3", "x:4", "x:5", "x:3"])

        assert found == {"x:3": SLOTS_FULL, "x:4": NO_TOKEN}
        assert await notes.get_many([]) == {}

    async def test_tenants_have_their_own_notes(self, notes: WaitingNotes) -> None:
        await notes.note("x:3", SLOTS_FULL)
        with tenant_scope("acme"):
            assert await notes.get("x:3") is None
            await notes.note("x:3", NO_TOKEN)

        assert await notes.get("x:3") == SLOTS_FULL

    async def test_notes_outside_a_tenant_scope_fail_closed(self, notes: WaitingNotes) -> None:
        with no_tenant_scope(), pytest.raises(TenantContextMissingError):
            await notes.note("x:3", SLOTS_FULL)


class TestMemoryWaitingNotes(WaitingNotesContract):
    @pytest.fixture
    def notes(self, clock: Clock) -> WaitingNotes:
        return MemoryWaitingNotes(clock)

    async def test_a_note_nobody_clears_expires(self, clock: FakeClock) -> None:
        notes = MemoryWaitingNotes(clock)
        await notes.note("x:3", SLOTS_FULL)
        clock.advance(WAITING_NOTE_TTL_MS)

        assert await notes.get("x:3") is None


class RedisWaitingNotesContract(WaitingNotesContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def notes(self, client: redis.Redis, keys: RedisKeys) -> WaitingNotes:
        return RedisWaitingNotes(client, keys)

    async def test_a_note_lives_in_the_executions_hash_tag_with_a_ttl(
        self, notes: WaitingNotes, client: redis.Redis, keys: RedisKeys, namespace: str
    ) -> None:
        await notes.note("x:3", SLOTS_FULL)

        assert keys.execution_waiting("x:3") == f"{namespace}:x:{{x:3}}:waiting"
        assert 0 < await client.pttl(keys.execution_waiting("x:3")) <= WAITING_NOTE_TTL_MS

    async def test_a_note_this_build_cannot_read_hides_itself(
        self, notes: WaitingNotes, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await client.set(keys.execution_waiting("x:3"), '{"reason": "from_the_future"}')

        assert await notes.get("x:3") is None


class TestFakeRedisWaitingNotes(RedisWaitingNotesContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisWaitingNotes(RedisWaitingNotesContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
