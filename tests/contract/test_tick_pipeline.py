"""The checkpoints of one event-loop tick share one pipeline (P1, P2): ``TickPipeline``.

Counted on the wire of a real Redis (single node and cluster): the saves of many executions
that step in the same tick leave as one write per node, each caller gets exactly its own
replies, and a failure stays with the caller it belongs to — or reaches every caller when the
round trip itself failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.redis.tick_pipeline import TickPipeline, tick_pipeline
from plaita.domain.execution import ExecutionState, ExecutionStatus

from .conftest import real_redis_client
from .test_checkpoint_costs import Wire, parse_resp, wired_real_redis

pytestmark = pytest.mark.redis

#: Nodes that hold slots in the test cluster: a write per node at most.
CLUSTER_PRIMARIES = 3


@pytest.fixture
def wire() -> Wire:
    return Wire()


@pytest.fixture
async def client(wire: Wire, keys: RedisKeys, redis_topology: str) -> AsyncIterator[redis.Redis]:
    async with wired_real_redis(wire, keys, redis_topology) as client:
        if isinstance(client, redis.RedisCluster):
            await client.initialize()
        yield client


def state(execution_id: str, *, updated_at_ms: int = 1_000) -> ExecutionState:
    return ExecutionState(
        execution_id=execution_id,
        flow_id="flow",
        flow_version="1",
        fingerprint="f",
        status=ExecutionStatus.RUNNING,
        created_at_ms=1_000,
        updated_at_ms=updated_at_ms,
        next_node_id="a",
    )


def most_writes(topology: str) -> int:
    return 1 if topology == "node" else CLUSTER_PRIMARIES


def writes_carrying(wire: Wire, command: str) -> int:
    """The writes that carry ``command`` (a new connection's handshake is left out)."""
    name = command.encode()
    return sum(any(args[0].upper() == name for args in parse_resp(buffer)) for buffer in wire.sent)


async def test_the_saves_of_one_tick_leave_as_one_write_per_node(
    client: redis.Redis, keys: RedisKeys, wire: Wire, redis_topology: str
) -> None:
    repository = RedisExecutionRepository(client, keys)
    await repository.accept(state("warm-up"))  # the save script is loaded
    ids = [f"tick-{n}" for n in range(24)]
    wire.clear()

    accepted = await asyncio.gather(*(repository.accept(state(i)) for i in ids))

    assert accepted == [True] * len(ids)
    assert 1 <= writes_carrying(wire, "EVALSHA") <= most_writes(redis_topology)
    assert wire.commands().count("EVALSHA") == len(ids)
    for execution_id in ids:
        assert await repository.load(execution_id) == state(execution_id)


async def test_each_caller_gets_its_own_replies_and_only_its_own_error(
    client: redis.Redis, keys: RedisKeys, wire: Wire, redis_topology: str
) -> None:
    tick = TickPipeline(client)
    await client.set(keys.tombstone("text"), "not a list")

    def push(key: str, value: str) -> Any:
        return lambda pipe: (pipe.rpush(key, value), pipe.llen(key))

    calls = [push(keys.execution_history(f"l{n}"), f"v{n}") for n in range(6)]
    wrong = push(keys.tombstone("text"), "x")  # WRONGTYPE: a string, not a list
    wire.clear()

    replies = await asyncio.gather(*(tick.run(call) for call in [*calls, wrong]))

    assert replies[:6] == [[1, 1]] * 6
    assert all(isinstance(reply, ResponseError) for reply in replies[6])
    assert 1 <= writes_carrying(wire, "RPUSH") <= most_writes(redis_topology)


async def test_a_cancelled_caller_leaves_the_others_their_replies(
    client: redis.Redis, keys: RedisKeys
) -> None:
    tick = TickPipeline(client)
    key = keys.execution_history
    first = asyncio.ensure_future(tick.run(lambda pipe: pipe.rpush(key("a"), "1")))
    second = asyncio.ensure_future(tick.run(lambda pipe: pipe.rpush(key("b"), "1")))
    await asyncio.sleep(0)
    first.cancel()

    assert await second == [1]
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_more_callers_than_one_batch_go_out_as_further_pipelines(
    client: redis.Redis, keys: RedisKeys, wire: Wire, redis_topology: str
) -> None:
    tick = TickPipeline(client, max_batch=4)
    wire.clear()

    replies = await asyncio.gather(
        *(tick.run(lambda pipe, n=n: pipe.incr(keys.counters(f"c{n}"))) for n in range(10))
    )

    assert replies == [[1]] * 10
    assert 3 <= writes_carrying(wire, "INCRBY") <= 3 * most_writes(redis_topology)


async def test_a_failed_round_trip_reaches_every_caller(keys: RedisKeys) -> None:
    # Nothing listens on port 1: the connection fails for the whole pipeline.
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    tick = TickPipeline(client)
    try:
        replies = await asyncio.gather(
            *(tick.run(lambda pipe, n=n: pipe.get(keys.tombstone(f"t{n}"))) for n in range(3)),
            return_exceptions=True,
        )
    finally:
        await client.aclose()

    assert all(isinstance(reply, RedisConnectionError) for reply in replies)


def test_a_tick_pipeline_carries_at_least_one_caller() -> None:
    client = real_redis_client("node", decode_responses=False)
    with pytest.raises(ValueError, match="at least one caller"):
        TickPipeline(client, max_batch=0)


async def test_a_cluster_connection_lost_between_calls_is_retried_for_its_callers(
    keys: RedisKeys,
) -> None:
    """A cluster pipeline answers a dead connection's commands with the error instead of
    raising it; the tick pipeline sends those callers' commands again, as redis-py would
    retry a single command."""
    name = f"plaita-tick-{keys.namespace[-8:]}"
    client = real_redis_client("cluster", decode_responses=True, client_name=name)
    assert isinstance(client, redis.RedisCluster)
    tick = TickPipeline(client)
    counters = [keys.counters(f"c{n}") for n in range(12)]
    try:
        assert (
            await asyncio.gather(
                *(tick.run(lambda pipe, key=key: pipe.incr(key)) for key in counters)
            )
            == [[1]] * 12
        )
        for node in client.get_primaries():
            # Every connection this client holds on the node is closed by the server.
            killer = redis.Redis(host=node.host, port=node.port, decode_responses=True)
            for entry in await killer.client_list():
                if entry.get("name") == name:
                    await killer.client_kill_filter(_id=entry["id"])
            await killer.aclose()

        again = await asyncio.gather(
            *(tick.run(lambda pipe, key=key: pipe.incr(key)) for key in counters)
        )

        assert again == [[2]] * 12
    finally:
        await client.delete(*counters)
        await client.aclose()


def test_callers_left_by_an_ended_event_loop_do_not_hold_up_the_next_one(
    keys: RedisKeys,
) -> None:
    """A loop that ends between a caller's queueing and the flush leaves that caller behind
    (here: put there directly); the first caller on the next loop still gets its flush."""

    async def ask(tick: TickPipeline) -> list[Any]:
        return await asyncio.wait_for(tick.run(lambda pipe: pipe.get(keys.tombstone("b"))), 5)

    client = real_redis_client("node", decode_responses=True)
    tick = TickPipeline(client)
    stale = asyncio.new_event_loop()
    tick._waiting.append((lambda pipe: pipe.get(keys.tombstone("a")), stale.create_future()))
    stale.close()
    fresh = asyncio.new_event_loop()
    try:
        assert fresh.run_until_complete(ask(tick)) == [None]
    finally:
        fresh.run_until_complete(client.aclose())
        fresh.close()


def test_the_adapters_of_one_client_share_one_tick_pipeline_and_it_goes_with_the_client(
    keys: RedisKeys,
) -> None:
    import gc
    import weakref

    client = real_redis_client("node", decode_responses=True)
    other = real_redis_client("node", decode_responses=True)
    shared = tick_pipeline(client)

    assert tick_pipeline(client) is shared
    assert tick_pipeline(other) is not shared
    gone = weakref.ref(client)
    del client, shared
    gc.collect()
    assert gone() is None
