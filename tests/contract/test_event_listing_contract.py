"""Event listing and index pruning (V5, V7), run on memory, fakeredis and real Redis.

A listing reads the type index when a type is named, else the time index across all types,
over ``[since_ms, until_ms)``, and applies every other filter (AND), oldest first. Records
expire ``ttl`` after their append while their index members stay: listings prune the dead
members they meet and the janitor the rest, a budget at a time, at most 500 per script call.

Time passes through ``elapse``: the memory family moves its fake clock, the Redis families
sleep while Redis expires records with a short TTL (``TTL_MS``).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest
import redis.asyncio as redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plaita.adapters.memory.events import MemoryEventLog
from plaita.adapters.redis.events import RedisEventLog
from plaita.adapters.redis.keys import RedisKeys
from plaita.domain.events import Event, EventQuery
from plaita.domain.janitor import PRUNE_BATCH

from .conftest import FakeClock
from .test_checkpoint_costs import Wire, parse_resp
from .test_subscription_listing_contract import named, prune_candidates, sent, wired

Log = MemoryEventLog | RedisEventLog
#: A fresh log with records kept ``ttl_ms`` (None: the default, 7 days).
MakeLog = Callable[[int | None], Log]
Elapse = Callable[[int], Awaitable[None]]
#: Short enough for the Redis families to sleep through, long enough for a test's work
#: (pruning 600 dead members on fakeredis under a loaded CI took over 1.5 s: the live
#: record expired while the listing ran).
TTL_MS = 3_000
DAY_MS = 24 * 3600 * 1000
EXAMPLES = itertools.count()


def event(
    event_id: str,
    *,
    event_type: str = "payment.received",
    timestamp_ms: int = 1_000,
    correlation_id: str | None = "order-7",
    tenant_id: str = "acme",
) -> Event:
    return Event(
        event_id=event_id,
        event_type=event_type,
        timestamp_ms=timestamp_ms,
        data={"amount": 12},
        correlation_id=correlation_id,
        source="shop",
        tenant_id=tenant_id,
    )


def ids(found: Sequence[Event]) -> list[str]:
    return [e.event_id for e in found]


def expected(appended: Sequence[Event], query: EventQuery) -> list[Event]:
    """What a listing must answer: the definition of V7, by brute force."""
    latest = {e.event_id: e for e in appended}
    matching = [e for e in latest.values() if query.matches(e)]
    return sorted(matching, key=lambda e: (e.timestamp_ms, e.event_id))[: query.limit]


values = st.sampled_from(["a", "b", "a:b", "b:"])
events = st.builds(
    event,
    st.sampled_from(["e1", "e2", "e:3", "e:3:", "e4", "5", "e7"]),
    event_type=values,
    timestamp_ms=st.integers(min_value=0, max_value=6),
    correlation_id=st.none() | values,
    tenant_id=st.sampled_from(["acme", "globex"]),
)
bounds = st.none() | st.integers(min_value=0, max_value=7)
queries = st.builds(
    lambda since, until, **rest: EventQuery(
        since_ms=since,
        until_ms=None if until is None or since is None else since + until,
        **rest,
    ),
    since=bounds,
    until=bounds,
    event_type=st.none() | values,
    correlation_id=st.none() | values,
    tenant_id=st.none() | st.sampled_from(["acme", "globex"]),
    limit=st.integers(min_value=1, max_value=8),
)


async def age_out(log: Log, elapse: Elapse, dead: Sequence[Event], live: Event) -> None:
    """Append ``dead`` and ``live`` so that only ``live`` is stored when this returns.

    ``live`` comes 0.8 TTL later, so its append extends the indexes' TTL past the moment
    ``dead`` expire: their members stay in live indexes, as on a busy deployment. When this
    returns, ``live`` has 0.75 TTL (over two seconds) to live: time for the test's listings.
    """
    for each in dead:
        await log.append(each)
    await elapse(TTL_MS * 80 // 100)
    await log.append(live)
    await elapse(TTL_MS * 25 // 100)
    assert await log.get(dead[-1].event_id) is None
    assert await log.get(live.event_id) == live


class EventListingContract:
    @pytest.fixture
    def make_log(self) -> MakeLog:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    @pytest.fixture
    def log(self, make_log: MakeLog) -> Log:
        return make_log(None)

    @pytest.fixture
    def short_log(self, make_log: MakeLog) -> Log:
        return make_log(TTL_MS)

    async def append_all(self, log: Log, appended: Sequence[Event]) -> None:
        for each in appended:
            await log.append(each)

    async def test_window_is_since_inclusive_until_exclusive(self, log: Log) -> None:
        await self.append_all(log, [event(f"e{t}", timestamp_ms=t) for t in (10, 20, 30, 40)])

        query = EventQuery(event_type="payment.received", since_ms=20, until_ms=40)
        assert ids(await log.list(query)) == ["e20", "e30"]
        assert ids(await log.list(EventQuery(since_ms=30))) == ["e30", "e40"]
        assert ids(await log.list(EventQuery(until_ms=20))) == ["e10"]
        assert list(await log.list(EventQuery(since_ms=20, until_ms=20))) == []

    async def test_every_filter_applies_to_the_candidates(self, log: Log) -> None:
        """V7: type (index) AND correlation AND tenant AND window."""
        appended = [
            event("e1", timestamp_ms=1),
            event("e2", timestamp_ms=2, correlation_id="order-8"),
            event("e3", timestamp_ms=3, tenant_id="globex"),
            event("e4", timestamp_ms=4, event_type="payment.refunded"),
            event("e5", timestamp_ms=5, correlation_id=None),
            event("e6", timestamp_ms=6),
        ]
        await self.append_all(log, appended)
        for query in (
            EventQuery(event_type="payment.received", correlation_id="order-7"),
            EventQuery(correlation_id="order-7", tenant_id="acme"),
            EventQuery(event_type="payment.received", tenant_id="globex"),
            EventQuery(tenant_id="acme", since_ms=2, until_ms=6),
            EventQuery(event_type="payment.refunded", correlation_id="order-7"),
        ):
            assert ids(await log.list(query)) == ids(expected(appended, query)), query

        query = EventQuery(
            event_type="payment.received", correlation_id="order-7", tenant_id="acme", until_ms=6
        )
        assert ids(await log.list(query)) == ["e1"]

    async def test_without_a_type_every_type_is_listed_oldest_first(self, log: Log) -> None:
        await self.append_all(
            log,
            [
                event("b", timestamp_ms=5, event_type="t1"),
                event("a", timestamp_ms=5, event_type="t2"),
                event("c", timestamp_ms=1, event_type="t3"),
                event("d", timestamp_ms=9, event_type="t1"),
            ],
        )

        assert ids(await log.list(EventQuery())) == ["c", "a", "b", "d"]
        assert ids(await log.list(EventQuery(limit=2))) == ["c", "a"]
        assert ids(await log.list(EventQuery(event_type="t1", limit=1))) == ["b"]

    async def test_ids_types_and_correlations_holding_colons_stay_apart(self, log: Log) -> None:
        await self.append_all(
            log,
            [
                event("ev:1", event_type="a:b", correlation_id="c:1", timestamp_ms=1),
                event("ev:1:", event_type="a", correlation_id="c", timestamp_ms=2),
                event("ev", event_type="a:b:", correlation_id="c:1:", timestamp_ms=3),
            ],
        )

        assert ids(await log.list(EventQuery(event_type="a:b"))) == ["ev:1"]
        assert ids(await log.list(EventQuery(event_type="a"))) == ["ev:1:"]
        assert ids(await log.list(EventQuery(correlation_id="c:1"))) == ["ev:1"]
        assert ids(await log.list(EventQuery(correlation_id="c:1:"))) == ["ev"]
        assert await log.get("ev:1:") == event(
            "ev:1:", event_type="a", correlation_id="c", timestamp_ms=2
        )

    async def test_expired_events_are_not_listed_and_their_members_are_pruned(
        self, short_log: Log, elapse: Elapse
    ) -> None:
        """V7, more than 500 dead members: the listing skips them and prunes them from the
        type index it read; the janitor then finds only the time index's."""
        dead = [event(f"old:{n}", timestamp_ms=n) for n in range(600)]
        live = event("new", timestamp_ms=10_000)
        await age_out(short_log, elapse, dead, live)

        assert ids(await short_log.list(EventQuery(event_type="payment.received"))) == ["new"]
        assert await short_log.prune_indexes(budget=10_000) == 600  # the time index's
        assert ids(await short_log.list(EventQuery(limit=1000))) == ["new"]
        assert await short_log.prune_indexes(budget=10_000) == 0

    async def test_the_janitor_keeps_to_its_budget(self, short_log: Log, elapse: Elapse) -> None:
        """V7: 600 expired events in two indexes = 1200 dead members, at most 500 a tick."""
        dead = [event(f"old:{n}", timestamp_ms=n) for n in range(600)]
        live = event("new", timestamp_ms=10_000)
        await age_out(short_log, elapse, dead, live)

        ticks = []
        while (pruned := await short_log.prune_indexes(budget=500)) > 0:
            ticks.append(pruned)
            assert len(ticks) < 10

        assert ticks[0] == 500 and max(ticks) <= 500
        assert sum(ticks) == 1200
        assert ids(await short_log.list(EventQuery())) == ["new"]

    async def test_pruning_an_empty_log_is_a_no_op(self, log: Log) -> None:
        assert await log.prune_indexes(budget=500) == 0
        assert list(await log.list(EventQuery())) == []

    async def test_pruning_live_indexes_removes_nothing(self, log: Log) -> None:
        appended = [event(f"e{n}", timestamp_ms=n, event_type=f"t{n % 3}") for n in range(20)]
        await self.append_all(log, appended)

        assert await log.prune_indexes(budget=7) == 0
        assert await log.prune_indexes(budget=10_000) == 0
        assert ids(await log.list(EventQuery())) == ids(appended)

    async def test_a_budget_below_one_is_refused(self, log: Log) -> None:
        with pytest.raises(ValueError, match="budget"):
            await log.prune_indexes(budget=0)

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(appended=st.lists(events, max_size=10), asked=st.lists(queries, max_size=6))
    async def test_any_query_answers_as_its_definition(
        self, make_log: MakeLog, appended: list[Event], asked: list[EventQuery]
    ) -> None:
        """Hypothesis, V7: on every backend a listing is exactly the AND of its filters."""
        log = make_log(None)
        await self.append_all(log, appended)
        for query in asked:
            assert ids(await log.list(query)) == ids(expected(appended, query)), query


class TestMemoryEventListing(EventListingContract):
    @pytest.fixture
    def make_log(self, clock: FakeClock) -> MakeLog:
        return lambda ttl_ms: MemoryEventLog(clock, ttl_ms=ttl_ms or 7 * DAY_MS)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock

    async def test_an_index_expires_with_its_last_record(
        self, short_log: Log, elapse: Elapse
    ) -> None:
        """The twin of a Redis index TTL: gone with its newest record, members and all."""
        await short_log.append(event("e1"))
        await elapse(TTL_MS)

        assert list(await short_log.list(EventQuery())) == []
        assert await short_log.prune_indexes(budget=500) == 0


class RedisEventChecks:
    """Redis only: wire costs, index TTLs that only extend, 500 candidates per script."""

    kind = "fake"

    @pytest.fixture
    def wire(self) -> Wire:
        return Wire()

    @pytest.fixture
    async def client(
        self, wire: Wire, decode_responses: bool, namespace: str
    ) -> AsyncIterator[redis.Redis]:
        async with wired(self.kind, wire, decode_responses, namespace) as client:
            yield client

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    @pytest.fixture
    def make_log(self, client: redis.Redis, namespace: str) -> MakeLog:
        def make(ttl_ms: int | None) -> Log:
            keys = RedisKeys(f"{namespace}:h{next(EXAMPLES)}-{uuid.uuid4().hex[:6]}")
            if ttl_ms is None:
                return RedisEventLog(client, keys)
            return RedisEventLog(client, keys, ttl_seconds=ttl_ms / 1000)

        return make

    @pytest.fixture
    def redis_log(self, client: redis.Redis, keys: RedisKeys) -> RedisEventLog:
        return RedisEventLog(client, keys)

    async def test_append_is_two_round_trips_the_notification_after_the_record(
        self, redis_log: RedisEventLog, client: redis.Redis, keys: RedisKeys, wire: Wire
    ) -> None:
        """Two round trips, one more than the MULTI it used to be: the record, its indexes
        and the notification stream lie in different hash slots, which no MULTI spans on a
        Redis Cluster; and the notification may only be written once the record is stored,
        which a pipeline spread over a cluster's nodes does not order. So: one pipeline of
        the record and its indexes, then the XADD."""
        await client.ping()  # the connection's handshake is not the append's
        wire.clear()

        await redis_log.append(event("ev:1", timestamp_ms=77))

        assert wire.round_trips == 2
        stored, notified = ([c[0].upper() for c in parse_resp(b)] for b in wire.sent)
        assert stored[0] == b"SET" and b"MULTI" not in stored and b"XADD" not in stored
        assert {b"ZADD", b"SADD", b"PEXPIRE"} <= set(stored)
        assert notified == [b"XADD"]
        assert await client.zscore(keys.events_by_time(), "ev:1") == 77
        assert await client.zscore(keys.events_by_type("payment.received"), "ev:1") == 77

    async def test_candidates_are_fetched_in_one_round_trip(
        self, redis_log: RedisEventLog, wire: Wire, request: pytest.FixtureRequest
    ) -> None:
        """V7: one index read, then the candidates in one round trip: a pipeline of GETs (a
        MGET of records in many hash slots is refused by a Redis Cluster)."""
        for n in range(50):
            await redis_log.append(event(f"ev:{n}", timestamp_ms=n, tenant_id=f"t{n % 2}"))
        wire.clear()

        found = await redis_log.list(EventQuery(event_type="payment.received", limit=100))
        assert ids(found) == [f"ev:{n}" for n in range(50)]
        assert [c[0].upper() for c in sent(wire)] == [b"ZRANGE"] + [b"GET"] * 50
        assert wire.round_trips == 2

        wire.clear()
        found = await redis_log.list(EventQuery(tenant_id="t1", since_ms=10, limit=3))
        assert ids(found) == ["ev:11", "ev:13", "ev:15"]
        assert wire.round_trips == 2 and named(wire, "MGET") == []
        assert len(named(wire, "GET")) == 40  # every event of the window, once
        request.node.user_properties.append(("round_trips_event_list", wire.round_trips))

    async def test_index_ttls_only_ever_extend(
        self, redis_log: RedisEventLog, client: redis.Redis, keys: RedisKeys
    ) -> None:
        week_ms = 7 * DAY_MS
        by_type = keys.events_by_type("payment.received")
        indexes = (by_type, keys.events_by_time(), keys.event_indexes())
        await redis_log.append(event("ev:1"))
        for key in indexes:
            assert week_ms - 60_000 < await client.pttl(key) <= week_ms

        # Longer than the log's own TTL (an operator's, or a log configured longer): kept.
        for key in indexes:
            await client.pexpire(key, 30 * DAY_MS)
        await redis_log.append(event("ev:2"))
        for key in indexes:
            assert await client.pttl(key) > 29 * DAY_MS

        # Shorter: the next append extends it back to the full week.
        for key in indexes:
            await client.pexpire(key, 5_000)
        await redis_log.append(event("ev:3"))
        for key in indexes:
            assert week_ms - 60_000 < await client.pttl(key) <= week_ms

    async def test_a_short_lived_log_never_shortens_a_longer_index_ttl(
        self, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """Two processes with different TTL settings: the index keeps the longer one."""
        await RedisEventLog(client, keys).append(event("ev:1"))
        await RedisEventLog(client, keys, ttl_seconds=60).append(event("ev:2"))

        assert await client.pttl(keys.events_by_time()) > 7 * DAY_MS - 60_000
        assert await client.pttl(keys.event("ev:2")) <= 60_000

    async def test_prune_scripts_take_at_most_500_candidates(
        self, make_log: MakeLog, elapse: Elapse, wire: Wire
    ) -> None:
        """V7: a listing meeting 600 dead members prunes them in script calls of <= 500."""
        log = make_log(TTL_MS)
        await log.append(event("warm", timestamp_ms=99_999))
        await log.prune_indexes(budget=1)  # loads the prune script: no NOSCRIPT retry below
        dead = [event(f"old:{n}", timestamp_ms=n) for n in range(600)]
        await age_out(log, elapse, dead, event("new", timestamp_ms=10_000))
        wire.clear()

        found = await log.list(EventQuery(limit=1000))

        assert ids(found) == ["new"]
        calls = prune_candidates(wire)
        assert sum(calls) == 601 and max(calls) <= PRUNE_BATCH and len(calls) == 2


class TestFakeRedisEventListing(RedisEventChecks, EventListingContract):
    kind = "fake"


@pytest.mark.redis
class TestRedisEventListing(RedisEventChecks, EventListingContract):
    kind = "real"
