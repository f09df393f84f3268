"""ScheduleStore contract (W22, W24), run against every adapter family.

Schedules are kept per (tenant, id). The state moves only by ``set_paused`` and
``record_due`` — the domain's ``record_due`` rule, atomically — and a due is performed by
one holder at a time: ``claim_due`` checks, in the same atomic step, that the due still
waits (after the cursor, or buffered) and that no other holder's claim is alive.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine

from plaita.adapters.memory.schedules import MemoryScheduleStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.schedules import RedisScheduleStore
from plaita.adapters.sqlalchemy.schedules import SqlScheduleStore
from plaita.application.ports import DueClaim, ScheduleStore
from plaita.domain.cron_schedules import (
    MAX_ERROR_LENGTH,
    CatchUpPolicy,
    DueOutcome,
    OverlapPolicy,
    Schedule,
    ScheduleRef,
    ScheduleState,
)
from plaita.domain.errors import ScheduleExistsError

from .conftest import Elapse, FakeClock
from .sql_fixtures import PostgresEngine, SqliteEngine

CREATED = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC
DUE = CREATED + 60_000
NIGHTLY = ScheduleRef("default", "nightly")


def schedule(
    schedule_id: str = "nightly", tenant_id: str = "default", **options: object
) -> Schedule:
    return Schedule.create(
        schedule_id=schedule_id,
        tenant_id=tenant_id,
        flow_id="report",
        cron=options.pop("cron", "* * * * *"),
        now_ms=CREATED,
        **options,  # type: ignore[arg-type]
    )


class ScheduleStoreContract:
    @pytest.fixture
    def store(self) -> ScheduleStore:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    # --- definitions ------------------------------------------------------------------

    async def test_a_created_schedule_reads_back_whole_with_a_new_state(
        self, store: ScheduleStore
    ) -> None:
        created = schedule(
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            flow_version="3",
            input={"day": "monday", "nested": {"n": [1, 2]}},
            overlap="buffer_one",
            catch_up="all",
        )
        await store.create(created)

        found = await store.get(NIGHTLY)

        assert found is not None
        assert found.schedule == created
        assert found.schedule.overlap is OverlapPolicy.BUFFER_ONE
        assert found.schedule.catch_up is CatchUpPolicy.ALL
        assert found.state == ScheduleState(cursor_ms=CREATED)

    async def test_a_schedule_may_be_created_paused(self, store: ScheduleStore) -> None:
        await store.create(schedule(), paused=True)

        found = await store.get(NIGHTLY)
        assert found is not None and found.state.paused is True

    async def test_an_id_taken_in_the_tenant_is_refused_and_the_first_kept(
        self, store: ScheduleStore
    ) -> None:
        await store.create(schedule(cron="0 3 * * *"))

        with pytest.raises(ScheduleExistsError, match="nightly"):
            await store.create(schedule(cron="0 4 * * *"))

        found = await store.get(NIGHTLY)
        assert found is not None and found.schedule.cron.expression == "0 3 * * *"

    async def test_tenants_have_their_own_ids(self, store: ScheduleStore) -> None:
        """W24: the same id in two tenants is two schedules."""
        await store.create(schedule(tenant_id="default", cron="0 3 * * *"))
        await store.create(schedule(tenant_id="acme", cron="0 4 * * *"))

        acme = await store.get(ScheduleRef("acme", "nightly"))
        assert acme is not None and acme.schedule.cron.expression == "0 4 * * *"
        assert [s.ref for s in await store.list("acme")] == [ScheduleRef("acme", "nightly")]

    async def test_listings_are_sorted_by_tenant_and_id_and_ids_may_hold_colons(
        self, store: ScheduleStore
    ) -> None:
        for tenant_id, schedule_id in (
            ("default", "b"),
            ("acme", "z"),
            ("default", "a:hourly"),
            ("acme", "a"),
        ):
            await store.create(schedule(schedule_id, tenant_id))

        every = [s.ref for s in await store.list()]
        own = [s.ref for s in await store.list("default")]

        assert every == [
            ScheduleRef("acme", "a"),
            ScheduleRef("acme", "z"),
            ScheduleRef("default", "a:hourly"),
            ScheduleRef("default", "b"),
        ]
        assert own == [ScheduleRef("default", "a:hourly"), ScheduleRef("default", "b")]
        assert await store.list("nobody") == []

    async def test_a_deleted_schedule_is_gone_everywhere(self, store: ScheduleStore) -> None:
        await store.create(schedule())
        await store.claim_due(NIGHTLY, DUE, holder="a", ttl_ms=60_000)

        assert await store.delete(NIGHTLY) is True
        assert await store.delete(NIGHTLY) is False
        assert await store.get(NIGHTLY) is None
        assert await store.list() == []
        assert await store.claim_due(NIGHTLY, DUE, holder="b", ttl_ms=60_000) is DueClaim.GONE
        assert await store.record_due(NIGHTLY, DUE, DueOutcome.FIRED, execution_id="x") is False

    async def test_an_id_can_be_created_again_after_its_delete(self, store: ScheduleStore) -> None:
        await store.create(schedule(cron="0 3 * * *"))
        await store.record_due(NIGHTLY, DUE, DueOutcome.SKIPPED)
        await store.delete(NIGHTLY)

        await store.create(schedule(cron="0 4 * * *"))

        found = await store.get(NIGHTLY)
        assert found is not None and found.state == ScheduleState(cursor_ms=CREATED)

    # --- pause ------------------------------------------------------------------------

    async def test_pausing_keeps_the_cursor_and_resuming_passes_over_the_paused_dues(
        self, store: ScheduleStore
    ) -> None:
        await store.create(schedule())
        paused = await store.set_paused(NIGHTLY, True, now_ms=CREATED + 5_000)
        assert paused is not None and paused.state == ScheduleState(CREATED, paused=True)

        later = CREATED + 3_600_000
        resumed = await store.set_paused(NIGHTLY, False, now_ms=later)

        assert resumed is not None and resumed.state == ScheduleState(later, paused=False)
        assert await store.get(NIGHTLY) == resumed

    async def test_resuming_never_moves_the_cursor_back(self, store: ScheduleStore) -> None:
        await store.create(schedule())
        await store.record_due(NIGHTLY, DUE, DueOutcome.SKIPPED)

        resumed = await store.set_paused(NIGHTLY, False, now_ms=CREATED)

        assert resumed is not None and resumed.state.cursor_ms == DUE

    async def test_pausing_a_missing_schedule_is_none(self, store: ScheduleStore) -> None:
        assert await store.set_paused(NIGHTLY, True, now_ms=CREATED) is None

    # --- claims -----------------------------------------------------------------------

    async def test_one_holder_claims_a_due_and_others_find_it_held(
        self, store: ScheduleStore
    ) -> None:
        await store.create(schedule())

        assert await store.claim_due(NIGHTLY, DUE, holder="a", ttl_ms=60_000) is DueClaim.CLAIMED
        assert await store.claim_due(NIGHTLY, DUE, holder="b", ttl_ms=60_000) is DueClaim.HELD
        # Its own claim again (a retried tick of the same scheduler): renewed.
        assert await store.claim_due(NIGHTLY, DUE, holder="a", ttl_ms=60_000) is DueClaim.CLAIMED
        # Another due is another claim.
        later = DUE + 60_000
        assert await store.claim_due(NIGHTLY, later, holder="b", ttl_ms=60_000) is DueClaim.CLAIMED

    async def test_of_concurrent_claims_of_one_due_exactly_one_wins(
        self, store: ScheduleStore
    ) -> None:
        """W22: several schedulers race for the same due; one performs it."""
        await store.create(schedule())

        claims = await asyncio.gather(
            *(store.claim_due(NIGHTLY, DUE, holder=f"h{n}", ttl_ms=60_000) for n in range(8))
        )

        assert sorted(claims) == sorted([DueClaim.CLAIMED] + [DueClaim.HELD] * 7)

    async def test_a_claim_expires_and_another_holder_takes_the_due(
        self, store: ScheduleStore, elapse: Elapse
    ) -> None:
        """W22: a scheduler killed holding a claim delays its due by the TTL, no more."""
        await store.create(schedule())
        await store.claim_due(NIGHTLY, DUE, holder="dead", ttl_ms=100)

        await elapse(250)

        assert await store.claim_due(NIGHTLY, DUE, holder="live", ttl_ms=60_000) is DueClaim.CLAIMED
        assert await store.claim_due(NIGHTLY, DUE, holder="dead", ttl_ms=100) is DueClaim.HELD

    async def test_a_due_at_or_before_the_cursor_is_done(self, store: ScheduleStore) -> None:
        await store.create(schedule())

        assert await store.claim_due(NIGHTLY, CREATED, holder="a", ttl_ms=1000) is DueClaim.DONE
        assert await store.claim_due(NIGHTLY, CREATED - 1, holder="a", ttl_ms=1000) is (
            DueClaim.DONE
        )

    async def test_a_due_of_a_missing_schedule_is_gone(self, store: ScheduleStore) -> None:
        assert await store.claim_due(NIGHTLY, DUE, holder="a", ttl_ms=1000) is DueClaim.GONE

    async def test_a_claim_needs_a_positive_ttl(self, store: ScheduleStore) -> None:
        await store.create(schedule())
        with pytest.raises(ValueError, match="ttl"):
            await store.claim_due(NIGHTLY, DUE, holder="a", ttl_ms=0)

    # --- recording dues ---------------------------------------------------------------

    async def test_a_fired_due_moves_the_cursor_and_names_its_execution(
        self, store: ScheduleStore
    ) -> None:
        await store.create(schedule())
        await store.claim_due(NIGHTLY, DUE, holder="a", ttl_ms=60_000)

        assert await store.record_due(NIGHTLY, DUE, DueOutcome.FIRED, execution_id="x-1") is True

        found = await store.get(NIGHTLY)
        assert found is not None
        assert found.state == ScheduleState(
            cursor_ms=DUE, last_due_ms=DUE, last_execution_id="x-1", fired=1
        )
        # Its claim went with the record: nobody can take the due again.
        assert await store.claim_due(NIGHTLY, DUE, holder="b", ttl_ms=60_000) is DueClaim.DONE

    async def test_a_due_recorded_twice_counts_once(self, store: ScheduleStore) -> None:
        """W22: two replicas that both fired one due (a claim expired mid-start) leave one
        record; their starts shared the due's dedup key."""
        await store.create(schedule())
        assert await store.record_due(NIGHTLY, DUE, DueOutcome.FIRED, execution_id="x-1")

        assert await store.record_due(NIGHTLY, DUE, DueOutcome.FIRED, execution_id="x-2") is False
        assert await store.record_due(NIGHTLY, DUE, DueOutcome.SKIPPED) is False

        found = await store.get(NIGHTLY)
        assert found is not None
        assert (found.state.fired, found.state.skipped, found.state.last_execution_id) == (
            1,
            0,
            "x-1",
        )

    async def test_an_older_due_recorded_after_a_newer_one_changes_nothing(
        self, store: ScheduleStore
    ) -> None:
        await store.create(schedule())
        await store.record_due(NIGHTLY, DUE + 60_000, DueOutcome.FIRED, execution_id="x-2")

        assert await store.record_due(NIGHTLY, DUE, DueOutcome.FIRED, execution_id="x-1") is False

        found = await store.get(NIGHTLY)
        assert found is not None and found.state.cursor_ms == DUE + 60_000

    async def test_skips_and_failures_are_counted_and_the_last_error_kept(
        self, store: ScheduleStore
    ) -> None:
        await store.create(schedule())
        await store.record_due(NIGHTLY, DUE, DueOutcome.SKIPPED)
        await store.record_due(NIGHTLY, DUE + 60_000, DueOutcome.FAILED, error="E" * 2000)

        found = await store.get(NIGHTLY)
        assert found is not None
        assert found.state == ScheduleState(
            cursor_ms=DUE + 60_000, skipped=1, failed=1, last_error="E" * MAX_ERROR_LENGTH
        )

    async def test_a_buffered_due_waits_behind_the_cursor_until_it_fires(
        self, store: ScheduleStore
    ) -> None:
        """W22 buffer_one: the buffered due is the one due at or before the cursor that may
        still be claimed, and it fires once."""
        await store.create(schedule(overlap="buffer_one"))
        await store.record_due(NIGHTLY, DUE, DueOutcome.FIRED, execution_id="x-1")
        buffered = DUE + 60_000
        assert await store.record_due(NIGHTLY, buffered, DueOutcome.BUFFERED) is True
        assert await store.record_due(NIGHTLY, buffered + 60_000, DueOutcome.SKIPPED) is True

        assert await store.claim_due(NIGHTLY, buffered, holder="a", ttl_ms=60_000) is (
            DueClaim.CLAIMED
        )
        assert await store.record_due(NIGHTLY, buffered, DueOutcome.FIRED, execution_id="x-2")

        found = await store.get(NIGHTLY)
        assert found is not None
        assert found.state == ScheduleState(
            cursor_ms=buffered + 60_000,
            last_due_ms=buffered,
            last_execution_id="x-2",
            fired=2,
            skipped=1,
        )
        assert await store.claim_due(NIGHTLY, buffered, holder="b", ttl_ms=60_000) is (
            DueClaim.DONE
        )
        assert (
            await store.record_due(NIGHTLY, buffered, DueOutcome.FIRED, execution_id="x") is False
        )

    async def test_recording_keeps_the_pause(self, store: ScheduleStore) -> None:
        await store.create(schedule(), paused=True)
        await store.record_due(NIGHTLY, DUE, DueOutcome.SKIPPED)

        found = await store.get(NIGHTLY)
        assert found is not None and found.state.paused is True


class TestMemoryScheduleStore(ScheduleStoreContract):
    @pytest.fixture
    def store(self, clock: FakeClock) -> ScheduleStore:
        return MemoryScheduleStore(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class RedisSchedules(ScheduleStoreContract):
    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def store(self, client: redis.Redis, keys: RedisKeys) -> ScheduleStore:
        return RedisScheduleStore(client, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def test_a_schedule_and_its_claims_share_one_hash_tag(self, keys: RedisKeys) -> None:
        """K2: the claim script reads the schedule and writes the claim in one slot."""
        record = keys.schedule("acme", "a:hourly")
        claim = keys.schedule_claim("acme", "a:hourly", DUE)

        assert "{a:hourly}" in record and claim.startswith(record)
        assert record.startswith(keys.tenant_namespace("acme"))

    async def test_an_index_member_without_its_schedule_is_passed_over(
        self, store: ScheduleStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """ADR 0024: a create that crashed after the index write leaves a member behind."""
        await client.sadd(keys.schedules(), "default:ghost")  # type: ignore[misc]
        await store.create(schedule())

        assert [s.ref for s in await store.list()] == [NIGHTLY]
        assert await store.delete(ScheduleRef("default", "ghost")) is False
        assert await client.smembers(keys.schedules()) in (
            {"default:nightly"},
            {b"default:nightly"},
        )  # type: ignore[misc]


class TestFakeRedisScheduleStore(RedisSchedules):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisScheduleStore(RedisSchedules):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


class SqlSchedules(ScheduleStoreContract):
    @pytest.fixture
    def store(self, engine: AsyncEngine, clock: FakeClock) -> ScheduleStore:
        return SqlScheduleStore(engine, clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class TestSqliteScheduleStore(SqliteEngine, SqlSchedules):
    pass


class TestPostgresScheduleStore(PostgresEngine, SqlSchedules):
    pass
