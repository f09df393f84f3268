"""Subscription listing and index pruning (V7), run on memory, fakeredis and real Redis.

Every backend answers every query alike: candidates from the most selective index the query
names, then **every** filter applied (AND), oldest first, at most ``limit``. Redis-only
checks, on fakeredis, the single node and the cluster, count what a listing sends
(candidates in one pipeline of GETs: one round trip on a single node, one per node on the
cluster) and make dead index members the only way Redis can: by deleting records behind the
store's back (an eviction, a hand-made ``DEL``), then watch listings and the janitor prune
them, at most 500 per script call.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

import fakeredis
import pytest
import redis.asyncio as redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio.connection import Connection

from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.adapters.redis.index_pruning import IndexPruner, in_every_index
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.domain.events import EventSubscription, SubscriptionQuery
from plaita.domain.janitor import PRUNE_BATCH

from .conftest import real_redis_client
from .test_checkpoint_costs import Wire, parse_resp, recording
from .test_subscription_store_contract import Between

Store = MemorySubscriptionStore | RedisSubscriptionStore
MakeStore = Callable[[], Store]
EXAMPLES = itertools.count()


def sub(
    subscription_id: str,
    *,
    event_type: str = "payment.received",
    flow_id: str = "orders",
    node_id: str = "wait",
    correlation_id: str | None = "order-7",
    tenant_id: str = "acme",
    created_at_ms: int = 1_000,
) -> EventSubscription:
    return EventSubscription(
        subscription_id=subscription_id,
        event_type=event_type,
        execution_id=f"x-{subscription_id}",
        flow_id=flow_id,
        node_id=node_id,
        created_at_ms=created_at_ms,
        correlation_id=correlation_id,
        filter_condition={"currency": "EUR"},
        tenant_id=tenant_id,
    )


def ids(found: Sequence[EventSubscription]) -> list[str]:
    return [s.subscription_id for s in found]


def expected(
    added: Sequence[EventSubscription], query: SubscriptionQuery
) -> list[EventSubscription]:
    """What a listing must answer: the definition of V7, by brute force."""
    latest = {s.subscription_id: s for s in added}
    matching = [s for s in latest.values() if query.matches(s)]
    return sorted(matching, key=lambda s: (s.created_at_ms, s.subscription_id))[: query.limit]


# Small alphabets (with ':') so that random subscriptions share fields and queries hit.
values = st.sampled_from(["a", "b", "a:b", "b:a:"])
subscriptions = st.builds(
    sub,
    st.sampled_from(["s1", "s2", "s:3", "s:3:", "s4", "5"]),
    event_type=values,
    flow_id=values,
    node_id=values,
    correlation_id=st.none() | values,
    tenant_id=st.sampled_from(["acme", "globex"]),
    created_at_ms=st.integers(min_value=0, max_value=5),
)
queries = st.builds(
    SubscriptionQuery,
    event_type=st.none() | values,
    correlation_id=st.none() | values,
    flow_id=st.none() | values,
    node_id=st.none() | values,
    tenant_id=st.none() | st.sampled_from(["acme", "globex"]),
    limit=st.integers(min_value=1, max_value=8),
)


class SubscriptionListingContract:
    @pytest.fixture
    def make_store(self) -> MakeStore:
        """A fresh, empty store on each call (hypothesis needs one per example)."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, make_store: MakeStore) -> Store:
        return make_store()

    async def add_all(self, store: Store, added: Sequence[EventSubscription]) -> None:
        for subscription in added:
            await store.add(subscription)

    async def test_every_filter_applies_whichever_index_is_read(self, store: Store) -> None:
        """V7: the index gives candidates, every named field filters them (AND)."""
        added = [
            sub("s1", created_at_ms=1),
            sub("s2", flow_id="refunds", created_at_ms=2),
            sub("s3", node_id="approve", created_at_ms=3),
            sub("s4", event_type="payment.refunded", created_at_ms=4),
            sub("s5", correlation_id="order-8", created_at_ms=5),
            sub("s6", tenant_id="globex", created_at_ms=6),
            sub("s7", correlation_id=None, created_at_ms=7),
            sub("s8", created_at_ms=8),
        ]
        await self.add_all(store, added)
        for query in (
            SubscriptionQuery(event_type="payment.received", flow_id="orders", node_id="wait"),
            SubscriptionQuery(correlation_id="order-7", tenant_id="acme"),
            SubscriptionQuery(correlation_id="order-7", event_type="payment.received"),
            SubscriptionQuery(flow_id="orders", tenant_id="globex"),
            SubscriptionQuery(node_id="wait", event_type="payment.refunded"),
            SubscriptionQuery(
                event_type="payment.received",
                correlation_id="order-7",
                flow_id="orders",
                node_id="wait",
                tenant_id="acme",
            ),
        ):
            assert ids(await store.list(query)) == ids(expected(added, query)), query

        everything = SubscriptionQuery(
            event_type="payment.received",
            correlation_id="order-7",
            flow_id="orders",
            node_id="wait",
            tenant_id="acme",
        )
        assert ids(await store.list(everything)) == ["s1", "s8"]

    async def test_a_query_naming_no_index_reads_every_subscription(self, store: Store) -> None:
        await self.add_all(
            store,
            [
                sub("s2", created_at_ms=2),
                sub("s1", tenant_id="globex", created_at_ms=1),
                sub("s3", event_type="other", correlation_id=None, created_at_ms=3),
            ],
        )

        assert ids(await store.list(SubscriptionQuery())) == ["s1", "s2", "s3"]
        assert ids(await store.list(SubscriptionQuery(tenant_id="acme"))) == ["s2", "s3"]

    async def test_oldest_first_ties_by_id_and_at_most_limit(self, store: Store) -> None:
        await self.add_all(
            store,
            [
                sub("b", created_at_ms=5),
                sub("a", created_at_ms=5),
                sub("c", created_at_ms=1),
                sub("d", created_at_ms=9),
            ],
        )

        query = SubscriptionQuery(event_type="payment.received", limit=3)
        assert ids(await store.list(query)) == ["c", "a", "b"]
        assert ids(await store.list(SubscriptionQuery(flow_id="orders", limit=1))) == ["c"]

    async def test_ids_and_values_holding_colons_stay_apart(self, store: Store) -> None:
        """V7: ``a:b`` is neither ``a`` nor a prefix game between index keys."""
        await self.add_all(
            store,
            [
                sub("sub:1", event_type="a:b", flow_id="f", node_id="n", correlation_id="c:1"),
                sub("sub:1:", event_type="a", flow_id="f:n", node_id="b", correlation_id="c"),
                sub("sub", event_type="a:b:", flow_id="f", node_id="n:", correlation_id="c:1:"),
            ],
        )

        assert ids(await store.list(SubscriptionQuery(event_type="a:b"))) == ["sub:1"]
        assert ids(await store.list(SubscriptionQuery(event_type="a"))) == ["sub:1:"]
        assert ids(await store.list(SubscriptionQuery(correlation_id="c:1"))) == ["sub:1"]
        assert ids(await store.list(SubscriptionQuery(correlation_id="c"))) == ["sub:1:"]
        assert ids(await store.list(SubscriptionQuery(flow_id="f:n"))) == ["sub:1:"]
        assert ids(await store.list(SubscriptionQuery(node_id="n:"))) == ["sub"]
        assert (await store.get("sub:1:")) == sub(
            "sub:1:", event_type="a", flow_id="f:n", node_id="b", correlation_id="c"
        )

    async def test_remove_leaves_no_index_entry_behind(self, store: Store) -> None:
        await self.add_all(store, [sub("s1"), sub("s2", created_at_ms=2)])

        assert await store.remove("s1") is True

        for query in (
            SubscriptionQuery(),
            SubscriptionQuery(event_type="payment.received"),
            SubscriptionQuery(correlation_id="order-7"),
            SubscriptionQuery(flow_id="orders"),
            SubscriptionQuery(node_id="wait"),
        ):
            assert ids(await store.list(query)) == ["s2"]
        assert await store.prune_indexes(budget=100) == 0

    async def test_re_adding_moves_the_subscription_in_every_index(self, store: Store) -> None:
        await store.add(sub("s1"))
        moved = sub(
            "s1", event_type="t2", flow_id="f2", node_id="n2", correlation_id=None, created_at_ms=7
        )

        await store.add(moved)

        assert list(await store.list(SubscriptionQuery(event_type="payment.received"))) == []
        assert list(await store.list(SubscriptionQuery(correlation_id="order-7"))) == []
        assert list(await store.list(SubscriptionQuery(flow_id="orders"))) == []
        assert list(await store.list(SubscriptionQuery(node_id="wait"))) == []
        assert list(await store.list(SubscriptionQuery(flow_id="f2", node_id="n2"))) == [moved]
        assert list(await store.list(SubscriptionQuery())) == [moved]

    async def test_adding_the_same_subscription_twice_keeps_one(self, store: Store) -> None:
        await store.add(sub("s1"))
        await store.add(sub("s1"))

        assert ids(await store.list(SubscriptionQuery())) == ["s1"]
        assert ids(await store.find("payment.received")) == ["s1"]

    async def test_pruning_an_empty_store_is_a_no_op(self, store: Store) -> None:
        assert await store.prune_indexes(budget=500) == 0
        assert list(await store.list(SubscriptionQuery())) == []

    async def test_pruning_live_indexes_removes_nothing(self, store: Store) -> None:
        added = [sub(f"s{n}", created_at_ms=n, flow_id=f"f{n % 3}") for n in range(20)]
        await self.add_all(store, added)

        assert await store.prune_indexes(budget=7) == 0
        assert await store.prune_indexes(budget=10_000) == 0
        assert ids(await store.list(SubscriptionQuery())) == ids(added)

    async def test_a_budget_below_one_is_refused(self, store: Store) -> None:
        with pytest.raises(ValueError, match="budget"):
            await store.prune_indexes(budget=0)

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(added=st.lists(subscriptions, max_size=10), asked=st.lists(queries, max_size=6))
    async def test_any_query_answers_as_its_definition(
        self,
        make_store: MakeStore,
        added: list[EventSubscription],
        asked: list[SubscriptionQuery],
    ) -> None:
        """Hypothesis, V7: on every backend a listing is exactly the AND of its filters."""
        store = make_store()
        await self.add_all(store, added)
        for query in asked:
            assert ids(await store.list(query)) == ids(expected(added, query)), query

    async def test_an_event_finds_its_correlations_and_the_uncorrelated_waits_only(
        self, store: Store
    ) -> None:
        """V4: the filter's candidates; matching beyond them stays the domain's."""
        await self.add_all(
            store,
            [
                sub("mine", correlation_id="order-7", created_at_ms=3),
                sub("anyone", correlation_id=None, created_at_ms=1),
                sub("theirs", correlation_id="order-8"),
                sub("other-type", event_type="refund", correlation_id="order-7"),
                sub("other-type-any", event_type="refund", correlation_id=None),
            ],
        )

        found = await store.find_for_event("payment.received", "order-7")
        assert ids(found) == ["anyone", "mine"]
        assert ids(await store.find_for_event("payment.received", None)) == ["anyone"]
        assert ids(await store.find_for_event("refund", "order-8")) == ["other-type-any"]

        await store.remove("anyone")
        assert ids(await store.find_for_event("payment.received", "order-7")) == ["mine"]

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        added=st.lists(subscriptions, max_size=8),
        event_type=values,
        correlation_id=st.none() | values,
    )
    async def test_event_lookup_is_the_correlation_rule_by_brute_force(
        self,
        make_store: MakeStore,
        added: list[EventSubscription],
        event_type: str,
        correlation_id: str | None,
    ) -> None:
        store = make_store()
        await self.add_all(store, added)
        latest = {s.subscription_id: s for s in added}.values()
        wanted = sorted(
            (
                s
                for s in latest
                if s.event_type == event_type and s.correlation_id in (None, correlation_id)
            ),
            key=lambda s: (s.created_at_ms, s.subscription_id),
        )
        assert ids(await store.find_for_event(event_type, correlation_id)) == ids(wanted)


class TestMemorySubscriptionListing(SubscriptionListingContract):
    @pytest.fixture
    def make_store(self) -> MakeStore:
        return MemorySubscriptionStore


# --- Redis: what a listing sends, and dead members ---------------------------------------


@contextlib.asynccontextmanager
async def wired(
    kind: str, wire: Wire, decode_responses: bool, namespace: str, topology: str = "node"
) -> AsyncIterator[redis.Redis]:
    """A fakeredis or real Redis client (``topology``: the single node or the cluster) whose
    every socket write is recorded in ``wire``."""
    client: redis.Redis
    if kind == "fake":
        client = fakeredis.FakeAsyncRedis(
            server=fakeredis.FakeServer(),
            decode_responses=decode_responses,
            connection_class=recording(fakeredis.FakeAsyncRedisConnection, wire),
        )
    else:
        recorded = recording(Connection, wire)
        client = real_redis_client(
            topology, decode_responses=decode_responses, connection_class=recorded
        )
        if isinstance(client, redis.RedisCluster):
            # RedisCluster.from_url drops connection_class: give it to the seed node and to
            # the nodes the client discovers, before it connects anywhere.
            client.connection_kwargs["connection_class"] = recorded
            for node in client.startup_nodes:
                node.connection_class = recorded
    try:
        yield client
    finally:
        created = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
        if created:
            await client.delete(*created)
        await client.aclose()


def sent(wire: Wire) -> list[list[bytes]]:
    return [command for buffer in wire.sent for command in parse_resp(buffer)]


def named(wire: Wire, name: str) -> list[list[bytes]]:
    return [command for command in sent(wire) if command[0].upper() == name.encode()]


def names(wire: Wire) -> list[bytes]:
    """The commands sent, by name, sorted: a cluster client sends a pipeline's commands to
    each node concurrently, so their order on the wire is not the pipeline's."""
    return sorted(command[0].upper() for command in sent(wire))


#: The prune script, and the SHA1 it is sent by (EVALSHA).
PRUNE_SCRIPT = read_script("index_prune")
PRUNE_SHA = hashlib.sha1(PRUNE_SCRIPT.encode()).hexdigest().encode()


def prune_candidates(wire: Wire) -> list[int]:
    """Candidates of each prune script call that ran: EVALSHA <sha> 1 <index> <id>…

    A server that had not seen the script answers NOSCRIPT, and the store loads it and sends
    those calls again: the calls sent before the script was loaded are not counted.
    """
    calls: list[int] = []
    for command in sent(wire):
        name = command[0].upper()
        if (
            name == b"SCRIPT"
            and command[1].upper() == b"LOAD"
            and command[2] == PRUNE_SCRIPT.encode()
        ):
            calls.clear()
        elif name == b"EVALSHA" and command[1] == PRUNE_SHA:
            calls.append(len(command) - 4)
    return calls


async def registered(client: redis.Redis, keys: RedisKeys) -> set[str]:
    """The index keys on the subscription registry."""
    return {_text(member) for member in await client.smembers(keys.subscription_indexes())}


def _text(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode()


def round_trips(client: redis.Redis, *steps: Sequence[str]) -> int:
    """What ``steps`` cost, each a pipeline of commands on the keys given, one after the
    other: one round trip each on a single node; on a cluster, one per node a step's keys
    live on (the nodes are sent to at the same time)."""
    if not isinstance(client, redis.RedisCluster):
        return len(steps)
    return sum(len({client.get_node_from_key(key).name for key in step}) for step in steps)


class RedisSubscriptionChecks:
    """Redis only: wire costs, index layout, dead members pruned on read and by the janitor."""

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
    def redis_store(self, client: redis.Redis, keys: RedisKeys) -> RedisSubscriptionStore:
        return RedisSubscriptionStore(client, keys)

    async def test_candidates_come_from_the_smallest_index_in_one_pipeline(
        self,
        redis_store: RedisSubscriptionStore,
        client: redis.Redis,
        keys: RedisKeys,
        wire: Wire,
        request: pytest.FixtureRequest,
    ) -> None:
        """V7: sizes in one round trip, one index read, candidates in one pipeline of GETs
        (an MGET is refused across the cluster's hash slots)."""
        for n in range(300):
            await redis_store.add(
                sub(f"s:{n}", flow_id=f"f{n % 3}", correlation_id=f"c:{n}", created_at_ms=n)
            )

        wire.clear()
        found = await redis_store.list(
            SubscriptionQuery(event_type="payment.received", correlation_id="c:7")
        )
        assert ids(found) == ["s:7"]
        assert names(wire) == sorted([b"ZCARD", b"ZCARD", b"ZRANGE", b"GET"])
        by_type = keys.subscriptions_by_type("payment.received")
        by_correlation = keys.subscriptions_by_correlation("c:7")
        assert wire.round_trips == round_trips(
            client, [by_type, by_correlation], [by_correlation], [keys.subscription("s:7")]
        )
        correlation_round_trips = wire.round_trips

        wire.clear()
        found = await redis_store.list(SubscriptionQuery(event_type="payment.received", limit=10))
        assert ids(found) == [f"s:{n}" for n in range(10)]
        assert named(wire, "MGET") == []
        # The type index decides the query: limit candidates.
        assert len(named(wire, "GET")) == 10
        assert wire.round_trips == round_trips(
            client, [by_type], [keys.subscription(f"s:{n}") for n in range(10)]
        )

        wire.clear()
        found = await redis_store.list(
            SubscriptionQuery(event_type="payment.received", flow_id="f1", limit=5)
        )
        assert ids(found) == [f"s:{n}" for n in (1, 4, 7, 10, 13)]
        assert len(named(wire, "GET")) == 100  # the flow index (100) beats the type index (300)
        request.node.user_properties.append(
            ("round_trips_list_two_fields", correlation_round_trips)
        )

    async def test_an_events_lookup_does_not_grow_with_the_types_other_waits(
        self,
        redis_store: RedisSubscriptionStore,
        client: redis.Redis,
        keys: RedisKeys,
        wire: Wire,
    ) -> None:
        """V4 + P4: 300 waits of the type, the event's lookup reads 1 candidate: 2 round
        trips on a single node (the two index reads, then the candidate)."""
        for n in range(300):
            await redis_store.add(sub(f"s:{n}", correlation_id=f"c:{n}", created_at_ms=n))

        wire.clear()
        found = await redis_store.find_for_event("payment.received", "c:7")

        assert ids(found) == ["s:7"]
        indexes = [
            keys.subscriptions_uncorrelated("payment.received"),
            keys.subscriptions_by_correlation("c:7"),
        ]
        assert wire.round_trips == round_trips(client, indexes, [keys.subscription("s:7")])
        assert len(named(wire, "GET")) == 1

    async def test_adding_writes_the_record_then_its_index_entries(
        self,
        redis_store: RedisSubscriptionStore,
        client: redis.Redis,
        keys: RedisKeys,
        wire: Wire,
    ) -> None:
        """Two round trips on a single node: the record swapped in (SET … GET), then its
        index entries and registry in one pipeline that reads the record back last."""
        await redis_store.add(sub("warm"))
        wire.clear()

        await redis_store.add(sub("s:new", created_at_ms=2))

        assert names(wire) == sorted([b"SET", *[b"ZADD"] * 5, b"SADD", b"GET"])
        record = keys.subscription("s:new")
        indexes = [
            keys.subscriptions_all(),
            keys.subscriptions_by_type("payment.received"),
            keys.subscriptions_by_flow("orders"),
            keys.subscriptions_by_node("wait"),
            keys.subscriptions_by_correlation("order-7"),
        ]
        step_two = [*indexes, keys.subscription_indexes(), record]
        assert wire.round_trips == round_trips(client, [record], step_two)
        assert sent(wire)[0][0].upper() == b"SET"  # the record first

    async def test_removing_deletes_the_record_then_its_index_entries(
        self,
        redis_store: RedisSubscriptionStore,
        client: redis.Redis,
        keys: RedisKeys,
        wire: Wire,
    ) -> None:
        """Two round trips on a single node: GETDEL, then the index entries (and the record
        read back, in case an add of the same id came in between)."""
        await redis_store.add(sub("s:1", correlation_id=None))
        wire.clear()

        assert await redis_store.remove("s:1") is True

        assert names(wire) == sorted([b"GETDEL", *[b"ZREM"] * 5, b"GET"])
        record = keys.subscription("s:1")
        indexes = [
            keys.subscriptions_all(),
            keys.subscriptions_by_type("payment.received"),
            keys.subscriptions_by_flow("orders"),
            keys.subscriptions_by_node("wait"),
            keys.subscriptions_uncorrelated("payment.received"),
        ]
        assert wire.round_trips == round_trips(client, [record], [*indexes, record])
        for index in indexes:
            assert await client.exists(index) == 0

    async def test_indexes_are_sorted_sets_without_ttl(
        self, redis_store: RedisSubscriptionStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """Subscriptions never expire, so neither do their indexes: a wait keeps its entry."""
        await redis_store.add(sub("s:1", created_at_ms=42))

        for key in (
            keys.subscriptions_by_type("payment.received"),
            keys.subscriptions_by_correlation("order-7"),
            keys.subscriptions_by_flow("orders"),
            keys.subscriptions_by_node("wait"),
            keys.subscriptions_all(),
        ):
            assert await client.zscore(key, "s:1") == 42
            assert await client.pttl(key) == -1
        registered = {
            m if isinstance(m, str) else m.decode()
            for m in await client.smembers(keys.subscription_indexes())
        }
        assert keys.subscriptions_by_flow("orders") in registered
        assert len(registered) == 5

    async def test_a_listing_prunes_the_dead_members_it_reads_500_per_call(
        self,
        redis_store: RedisSubscriptionStore,
        client: redis.Redis,
        keys: RedisKeys,
        wire: Wire,
    ) -> None:
        """V7: 600 records deleted behind the store's back (eviction): the listing skips
        them and prunes them from the index it read, at most 500 per script call."""
        for n in range(601):
            await redis_store.add(sub(f"s:{n}", created_at_ms=n))
        await client.script_load(PRUNE_SCRIPT)  # no NOSCRIPT retry below
        await client.delete(*(keys.subscription(f"s:{n}") for n in range(600)))
        wire.clear()

        found = await redis_store.list(SubscriptionQuery(event_type="payment.received"))

        assert ids(found) == ["s:600"]
        calls = prune_candidates(wire)
        assert sum(calls) == 600 and max(calls) <= PRUNE_BATCH and len(calls) >= 2
        assert await client.zcard(keys.subscriptions_by_type("payment.received")) == 1
        # The other indexes still hold them until the janitor or a listing passes.
        assert await client.zcard(keys.subscriptions_by_flow("orders")) == 601

    async def test_a_prune_puts_back_an_entry_whose_record_was_written_again(
        self, redis_store: RedisSubscriptionStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """The record of a member a listing found dead is written again (an add of the same
        id) before the prune script runs: the script removes the entry, the prune reads the
        record again and puts the entry back, with its score and its index registered."""
        await redis_store.add(sub("s:1", created_at_ms=42))
        index = keys.subscriptions_by_node("wait")
        await client.srem(keys.subscription_indexes(), index)
        pruner = IndexPruner(
            client,
            registry=keys.subscription_indexes(),
            record_key=in_every_index(keys.subscription),
        )

        # As if the listing had read s:1 while its record was gone.
        assert await pruner.prune(index, ["s:1"]) == 0

        assert await client.zscore(index, "s:1") == 42
        assert await client.sismember(keys.subscription_indexes(), index)
        assert ids(await redis_store.list(SubscriptionQuery(node_id="wait"))) == ["s:1"]

    async def test_the_janitor_keeps_to_its_budget_and_empties_the_registry(
        self,
        redis_store: RedisSubscriptionStore,
        client: redis.Redis,
        keys: RedisKeys,
        wire: Wire,
    ) -> None:
        """V7: 600 dead subscriptions in 5 indexes = 3000 dead members; each tick removes at
        most its budget, in script calls of at most 500, until nothing is left."""
        for n in range(600):
            await redis_store.add(sub(f"s:{n}", created_at_ms=n))
        await client.script_load(PRUNE_SCRIPT)  # no NOSCRIPT retry below
        await client.delete(*(keys.subscription(f"s:{n}") for n in range(600)))
        wire.clear()

        ticks = []
        while (pruned := await redis_store.prune_indexes(budget=700)) > 0:
            ticks.append(pruned)
            assert len(ticks) < 20

        assert sum(ticks) == 3000
        assert max(ticks) <= 700 and ticks[0] == 700
        assert max(prune_candidates(wire)) <= PRUNE_BATCH
        assert await client.exists(keys.subscription_indexes()) == 0
        assert list(await redis_store.list(SubscriptionQuery())) == []

    async def test_the_janitor_forgets_the_indexes_that_are_gone(
        self, redis_store: RedisSubscriptionStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """An index the janitor finds gone leaves the registry; the live ones stay."""
        await redis_store.add(sub("s:1", node_id="n1"))
        await client.sadd(keys.subscription_indexes(), keys.subscriptions_by_node("gone"))

        assert await redis_store.prune_indexes(budget=100) == 0

        assert await registered(client, keys) == {
            keys.subscriptions_all(),
            keys.subscriptions_by_type("payment.received"),
            keys.subscriptions_by_flow("orders"),
            keys.subscriptions_by_node("n1"),
            keys.subscriptions_by_correlation("order-7"),
        }

    async def test_the_janitor_keeps_an_index_made_again_while_it_forgets_it(
        self, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """The janitor takes a gone index off the registry, then looks again: a writer that
        registered the index earlier and added its entry just after the janitor's SREM
        (their order on a cluster, where the two go to different nodes) keeps it registered."""
        index = keys.subscriptions_by_node("n1")
        await client.sadd(keys.subscription_indexes(), index)

        async def entry_lands() -> None:
            await client.zadd(index, {"s:1": 1})

        janitor = RedisSubscriptionStore(Between(client, "srem", entry_lands), keys)
        assert await janitor.prune_indexes(budget=100) == 0

        assert await registered(client, keys) == {index}

    async def test_a_prune_after_the_server_lost_its_scripts_loads_it_again(
        self, redis_store: RedisSubscriptionStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """A restart or failover empties the script cache: the prune's EVALSHA meets NOSCRIPT,
        the script is loaded and the batches are sent again."""
        for n in range(3):
            await redis_store.add(sub(f"s:{n}", created_at_ms=n))
        await client.delete(keys.subscription("s:0"), keys.subscription("s:1"))
        await client.script_flush()

        found = await redis_store.list(SubscriptionQuery(event_type="payment.received"))

        assert ids(found) == ["s:2"]
        by_type = keys.subscriptions_by_type("payment.received")
        assert [_text(m) for m in await client.zrange(by_type, 0, -1)] == ["s:2"]

    async def test_the_janitor_walks_past_live_members_across_ticks(
        self, redis_store: RedisSubscriptionStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        """A live prefix longer than the budget does not hide dead members behind it."""
        for n in range(30):
            await redis_store.add(sub(f"s:{n}", created_at_ms=n, correlation_id=None))
        await client.delete(*(keys.subscription(f"s:{n}") for n in range(25, 30)))

        pruned = [await redis_store.prune_indexes(budget=10) for _ in range(40)]

        # 5 dead subscriptions in 5 indexes (all, type, flow, node, uncorrelated-by-type),
        # found 10 at a time.
        assert sum(pruned) == 25 and max(pruned) <= 10
        assert ids(await redis_store.list(SubscriptionQuery())) == [f"s:{n}" for n in range(25)]


class TestFakeRedisSubscriptionListing(SubscriptionListingContract, RedisSubscriptionChecks):
    kind = "fake"

    @pytest.fixture
    def make_store(self, client: redis.Redis, namespace: str) -> MakeStore:
        return lambda: RedisSubscriptionStore(
            client, RedisKeys(f"{namespace}:h{next(EXAMPLES)}-{uuid.uuid4().hex[:6]}")
        )


@pytest.mark.redis
class TestRedisSubscriptionListing(SubscriptionListingContract, RedisSubscriptionChecks):
    """The same checks on the single node and on the cluster (``redis_topology``)."""

    kind = "real"

    @pytest.fixture
    async def client(
        self, wire: Wire, decode_responses: bool, namespace: str, redis_topology: str
    ) -> AsyncIterator[redis.Redis]:
        async with wired(self.kind, wire, decode_responses, namespace, redis_topology) as client:
            yield client

    @pytest.fixture
    def make_store(self, client: redis.Redis, namespace: str) -> MakeStore:
        return lambda: RedisSubscriptionStore(
            client, RedisKeys(f"{namespace}:h{next(EXAMPLES)}-{uuid.uuid4().hex[:6]}")
        )
