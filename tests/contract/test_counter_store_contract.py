"""CounterStore contract (W2, W7, W8), run against every adapter family.

Each ``CounterChange`` op on each counter, applied in order and atomically, with a sliding TTL
refreshed by every ``apply``; and the open-attempt record a dispatch begins and ends (W2).
"""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.redis.counters import RedisCounterStore
from plaita.adapters.redis.keys import RedisKeys
from plaita.application.ports import Counters, CounterStore
from plaita.domain.budgets import (
    COUNTER_TTL_SECONDS,
    Counter,
    CounterChange,
    CounterOp,
    FailureKind,
    decide_crashed_attempts,
    decide_node_failure,
    decide_wakeup,
    on_node_success,
)

from .conftest import Elapse, FakeClock

TTL_MS = COUNTER_TTL_SECONDS * 1000
INC, RESET = CounterOp.INCREMENT, CounterOp.RESET


def node_retry(node_id: str | None, op: CounterOp = INC) -> CounterChange:
    return CounterChange(Counter.NODE_RETRIES, op, node_id)


class CounterStoreContract:
    @pytest.fixture
    def counters(self) -> CounterStore:
        raise NotImplementedError

    @pytest.fixture
    def elapse(self) -> Elapse:
        raise NotImplementedError

    async def test_an_execution_never_written_reads_zero(self, counters: CounterStore) -> None:
        assert await counters.read("x-1") == Counters()

    async def test_node_retries_are_counted_per_node(self, counters: CounterStore) -> None:
        changes = [node_retry("fetch"), node_retry("fetch"), node_retry("send")]

        after = await counters.apply("x-1", changes, ttl_ms=TTL_MS)

        assert after == Counters(node_retries={"fetch": 2, "send": 1})
        assert await counters.read("x-1") == after

    async def test_the_counter_of_node_id_none_is_keyed_empty(self, counters: CounterStore) -> None:
        """A failure without a node counts per execution (#123's conservative fallback)."""
        await counters.apply("x-1", [node_retry(None), node_retry(None)], ttl_ms=TTL_MS)

        assert (await counters.read("x-1")).node_retries == {"": 2}

    async def test_node_ids_with_separators_and_wildcards_are_kept_apart(
        self, counters: CounterStore
    ) -> None:
        ids = ["a:b", "a", "*", "noderetry:x", "Zoë 🚚"]
        await counters.apply("x-1", [node_retry(node_id) for node_id in ids], ttl_ms=TTL_MS)
        await counters.apply("x-1", [node_retry("a", RESET)], ttl_ms=TTL_MS)

        assert (await counters.read("x-1")).node_retries == {
            "a:b": 1,
            "*": 1,
            "noderetry:x": 1,
            "Zoë 🚚": 1,
        }

    async def test_a_node_reset_clears_only_that_node(self, counters: CounterStore) -> None:
        """W8: success clears that node's counter, never a sibling's."""
        await counters.apply(
            "x-1",
            [node_retry("fetch"), node_retry("send"), node_retry(None)],
            ttl_ms=TTL_MS,
        )

        after = await counters.apply("x-1", [node_retry("fetch", RESET)], ttl_ms=TTL_MS)

        assert after.node_retries == {"send": 1, "": 1}

    async def test_resetting_every_node_counter_keeps_the_others(
        self, counters: CounterStore
    ) -> None:
        """W7: a wake-up grants every node a fresh budget but keeps the total and the streak."""
        await counters.apply(
            "x-1",
            [
                node_retry("fetch"),
                node_retry(None),
                CounterChange(Counter.TOTAL_RETRIES, INC),
                CounterChange(Counter.WAKEUPS, INC),
                CounterChange(Counter.NO_FAIL, INC),
            ],
            ttl_ms=TTL_MS,
        )

        after = await counters.apply(
            "x-1", [CounterChange(Counter.ALL_NODE_RETRIES, RESET)], ttl_ms=TTL_MS
        )

        assert after == Counters(node_retries={}, total_retries=1, wakeups=1, no_fail=1)

    @pytest.mark.parametrize(
        ("counter", "attribute"),
        [
            (Counter.TOTAL_RETRIES, "total_retries"),
            (Counter.WAKEUPS, "wakeups"),
            (Counter.NO_FAIL, "no_fail"),
        ],
    )
    async def test_execution_counters_increment_and_reset(
        self, counters: CounterStore, counter: Counter, attribute: str
    ) -> None:
        increment = CounterChange(counter, INC)
        after = await counters.apply("x-1", [increment, increment, increment], ttl_ms=TTL_MS)
        assert getattr(after, attribute) == 3
        assert getattr(await counters.read("x-1"), attribute) == 3

        after = await counters.apply("x-1", [CounterChange(counter, RESET)], ttl_ms=TTL_MS)

        assert getattr(after, attribute) == 0
        assert await counters.read("x-1") == Counters()

    async def test_changes_apply_in_order(self, counters: CounterStore) -> None:
        after = await counters.apply(
            "x-1",
            [
                node_retry("a"),
                node_retry("a", RESET),
                CounterChange(Counter.NO_FAIL, RESET),
                CounterChange(Counter.NO_FAIL, INC),
                node_retry("b"),
                CounterChange(Counter.ALL_NODE_RETRIES, RESET),
                node_retry("c"),
            ],
            ttl_ms=TTL_MS,
        )

        assert after == Counters(node_retries={"c": 1}, no_fail=1)

    async def test_resetting_what_was_never_counted_is_harmless(
        self, counters: CounterStore
    ) -> None:
        after = await counters.apply(
            "x-1",
            [node_retry("a", RESET), CounterChange(Counter.ALL_NODE_RETRIES, RESET)],
            ttl_ms=TTL_MS,
        )

        assert after == Counters()

    async def test_executions_have_their_own_counters(self, counters: CounterStore) -> None:
        await counters.apply("x-1", [node_retry("a")], ttl_ms=TTL_MS)
        await counters.apply("x-2", [CounterChange(Counter.ALL_NODE_RETRIES, RESET)], ttl_ms=TTL_MS)

        assert (await counters.read("x-1")).node_retries == {"a": 1}
        assert await counters.read("x-2") == Counters()

    async def test_the_domain_decisions_apply_as_counted(self, counters: CounterStore) -> None:
        """The changes decide_node_failure, on_node_success and decide_wakeup hand out."""
        for _ in range(2):
            read = await counters.read("x-1")
            decision = decide_node_failure(
                FailureKind.TRANSIENT,
                failed_node="fetch",
                attempt=read.attempt("fetch"),
                retry_times=5,
                node_retries=read.node_retries.get("fetch", 0),
                total_retries=read.total_retries,
            )
            await counters.apply("x-1", decision.counter_changes, ttl_ms=TTL_MS)
        deterministic = decide_node_failure(
            FailureKind.DETERMINISTIC,
            failed_node="send",
            attempt=1,
            retry_times=5,
            node_retries=0,
            total_retries=2,
        )
        after = await counters.apply("x-1", deterministic.counter_changes, ttl_ms=TTL_MS)
        assert after == Counters(node_retries={"fetch": 2}, total_retries=2, no_fail=1)

        after = await counters.apply("x-1", on_node_success("fetch"), ttl_ms=TTL_MS)
        assert after == Counters(total_retries=2)

        await counters.apply("x-1", [node_retry("send")], ttl_ms=TTL_MS)
        wakeup = decide_wakeup(wakeups=after.wakeups, no_fail_streak=after.no_fail)
        after = await counters.apply("x-1", wakeup.counter_changes, ttl_ms=TTL_MS)
        assert after == Counters(total_retries=2, wakeups=1)

        crashed = decide_crashed_attempts(
            node_id="send", node_crashes=0, previous_unfinished=True, max_deliveries=5
        )
        after = await counters.apply("x-1", crashed.counter_changes, ttl_ms=TTL_MS)
        assert after == Counters(total_retries=3, wakeups=1, node_crashes={"send": 1})
        after = await counters.apply("x-1", on_node_success("send"), ttl_ms=TTL_MS)
        assert after == Counters(total_retries=3, wakeups=1)

    async def test_crashes_are_counted_per_node_apart_from_retries(
        self, counters: CounterStore
    ) -> None:
        """W2: a crashed attempt spends --max-deliveries, never the node's retryTimes."""
        crash = decide_crashed_attempts(
            node_id="fetch", node_crashes=0, previous_unfinished=True, max_deliveries=5
        )
        await counters.apply("x-1", [node_retry("fetch")], ttl_ms=TTL_MS)
        after = await counters.apply("x-1", crash.counter_changes, ttl_ms=TTL_MS)

        assert after.node_crashes == {"fetch": 1}
        assert after.node_retries == {"fetch": 1}
        assert after.attempt("fetch") == 3
        cleared = await counters.apply(
            "x-1", [CounterChange(Counter.ALL_NODE_CRASHES, RESET)], ttl_ms=TTL_MS
        )
        assert cleared.node_crashes == {}
        assert cleared.node_retries == {"fetch": 1}

    async def test_a_begun_attempt_is_seen_by_the_next_dispatch_until_it_ends(
        self, counters: CounterStore
    ) -> None:
        """W2: the record of a dispatch that never returned is what counts a crash."""
        first = await counters.begin_attempt("x-1", 7, ttl_ms=TTL_MS)
        assert first.open_attempt is None

        second = await counters.begin_attempt("x-1", 8, ttl_ms=TTL_MS)
        assert second.open_attempt == 7
        assert not await counters.end_attempt("x-1", 7)  # 8's record is never cleared by 7
        assert (await counters.read("x-1")).open_attempt == 8

        assert await counters.end_attempt("x-1", 8)
        assert (await counters.read("x-1")).open_attempt is None
        assert not await counters.end_attempt("x-1", 8)

    async def test_beginning_an_attempt_keeps_the_counters_and_reads_them(
        self, counters: CounterStore
    ) -> None:
        await counters.apply("x-1", [node_retry("fetch")], ttl_ms=TTL_MS)

        read = await counters.begin_attempt("x-1", 3, ttl_ms=TTL_MS)
        assert read == Counters(node_retries={"fetch": 1})
        after = await counters.apply("x-1", [node_retry("fetch")], ttl_ms=TTL_MS)
        assert after == Counters(node_retries={"fetch": 2}, open_attempt=3)
        await counters.end_attempt("x-1", 3)
        assert await counters.read("x-1") == Counters(node_retries={"fetch": 2})

    async def test_an_open_attempt_expires_with_the_counters(
        self, counters: CounterStore, elapse: Elapse
    ) -> None:
        await counters.begin_attempt("x-1", 1, ttl_ms=100)
        await elapse(250)

        assert await counters.read("x-1") == Counters()

    @pytest.mark.parametrize(
        "bad",
        [
            CounterChange(Counter.ALL_NODE_RETRIES, INC),
            CounterChange(Counter.ALL_NODE_CRASHES, INC),
            CounterChange(Counter.TOTAL_RETRIES, INC, "fetch"),
            CounterChange(Counter.WAKEUPS, RESET, "fetch"),
        ],
        ids=[
            "increment-all-nodes",
            "increment-all-crashes",
            "total-with-node",
            "wakeups-with-node",
        ],
    )
    async def test_a_meaningless_change_is_refused_and_nothing_is_written(
        self, counters: CounterStore, bad: CounterChange
    ) -> None:
        await counters.apply("x-1", [node_retry("a")], ttl_ms=TTL_MS)

        with pytest.raises(ValueError):
            await counters.apply("x-1", [node_retry("a"), bad, node_retry("b")], ttl_ms=TTL_MS)

        assert await counters.read("x-1") == Counters(node_retries={"a": 1})

    @pytest.mark.parametrize("ttl_ms", [0, -5])
    async def test_a_ttl_must_be_positive(self, counters: CounterStore, ttl_ms: int) -> None:
        with pytest.raises(ValueError, match="positive"):
            await counters.apply("x-1", [node_retry("a")], ttl_ms=ttl_ms)
        assert await counters.read("x-1") == Counters()

    async def test_counters_expire_after_their_ttl(
        self, counters: CounterStore, elapse: Elapse
    ) -> None:
        await counters.apply(
            "x-1", [node_retry("a"), CounterChange(Counter.WAKEUPS, INC)], ttl_ms=100
        )
        await elapse(250)

        assert await counters.read("x-1") == Counters()
        after = await counters.apply("x-1", [node_retry("a")], ttl_ms=TTL_MS)
        assert after == Counters(node_retries={"a": 1})

    async def test_every_apply_refreshes_the_ttl(
        self, counters: CounterStore, elapse: Elapse
    ) -> None:
        """The TTL slides: even an apply that only resets (or changes nothing) extends it."""
        await counters.apply("x-1", [node_retry("a"), node_retry("b")], ttl_ms=300)
        await elapse(200)
        await counters.apply("x-1", [node_retry("b", RESET)], ttl_ms=300)
        await elapse(200)
        assert await counters.read("x-1") == Counters(node_retries={"a": 1})
        await counters.apply("x-1", [], ttl_ms=300)
        await elapse(200)

        assert await counters.read("x-1") == Counters(node_retries={"a": 1})
        await elapse(200)
        assert await counters.read("x-1") == Counters()


class TestMemoryCounterStore(CounterStoreContract):
    @pytest.fixture
    def counters(self, clock: FakeClock) -> CounterStore:
        return MemoryCounterStore(clock)

    @pytest.fixture
    def elapse(self, advance_clock: Elapse) -> Elapse:
        return advance_clock


class RedisCounterStoreContract(CounterStoreContract):
    """The shared contract plus the hash layout the operations runbook documents."""

    @pytest.fixture
    def client(self) -> redis.Redis:
        raise NotImplementedError

    @pytest.fixture
    def counters(self, client: redis.Redis, keys: RedisKeys) -> CounterStore:
        return RedisCounterStore(client, keys)

    @pytest.fixture
    def elapse(self, sleep_real: Elapse) -> Elapse:
        return sleep_real

    async def test_one_hash_per_execution_with_named_fields_and_a_ttl(
        self, counters: CounterStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await counters.apply(
            "x-1",
            [
                node_retry("fetch"),
                node_retry(None),
                CounterChange(Counter.TOTAL_RETRIES, INC),
                CounterChange(Counter.WAKEUPS, INC),
                CounterChange(Counter.NO_FAIL, INC),
            ],
            ttl_ms=TTL_MS,
        )

        stored = await client.hgetall(keys.counters("x-1"))

        assert {_text(k): _text(v) for k, v in stored.items()} == {
            "noderetry:fetch": "1",
            "noderetry:": "1",
            "noderefetch": "1",
            "g1wakeups": "1",
            "nofail": "1",
        }
        assert TTL_MS - 60_000 < await client.pttl(keys.counters("x-1")) <= TTL_MS

    async def test_resetting_the_last_counter_deletes_the_hash(
        self, counters: CounterStore, client: redis.Redis, keys: RedisKeys
    ) -> None:
        await counters.apply("x-1", [node_retry("a")], ttl_ms=TTL_MS)
        await counters.apply("x-1", [node_retry("a", RESET)], ttl_ms=TTL_MS)

        assert await client.exists(keys.counters("x-1")) == 0


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class TestFakeRedisCounterStore(RedisCounterStoreContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


@pytest.mark.redis
class TestRedisCounterStore(RedisCounterStoreContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
