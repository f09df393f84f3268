"""``--partitions`` on real Redis: a worker refuses another partition count while carriers
wait in the recorded layout (exit 2), and the DLQ commands see every partition."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
import redis.asyncio as redis
from click.testing import CliRunner

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.partitions import partition_of
from plaita.entrypoints.cli import main

from .test_cli_ops import REDIS_URL, requires_redis

T = TypeVar("T")


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"plaita-e2e-{uuid.uuid4().hex[:12]}"
    yield name

    async def clean(client: redis.Redis, _keys: RedisKeys) -> None:
        created = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if created:
            await client.delete(*created)

    seed(name, clean)


def seed(namespace: str, body: Callable[[redis.Redis, RedisKeys], Awaitable[T]]) -> T:
    async def go() -> T:
        assert REDIS_URL is not None
        client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        try:
            return await body(client, RedisKeys(namespace))
        finally:
            await client.aclose()

    return asyncio.run(go())


def invoke(namespace: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    assert REDIS_URL is not None
    result = CliRunner().invoke(
        main,
        [*args, "--redis-url", REDIS_URL],
        env={"PLAITA_NAMESPACE": namespace, **(env or {})},
        catch_exceptions=False,
    )
    return result.exit_code, result.output


def start(execution_id: str) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="orders",
        version="1",
        params={},
        now_ms=int(time.time() * 1000),
        generations=LEGACY_GENERATIONS,
    )


@requires_redis
def test_a_worker_with_another_partition_count_is_refused_while_carriers_wait(
    namespace: str,
) -> None:
    async def one_waiting(client: redis.Redis, keys: RedisKeys) -> None:
        queue = RedisTaskQueue(client, keys)
        await queue.ensure_group()
        await queue.enqueue(start("x-1"))

    seed(namespace, one_waiting)

    code, out = invoke(namespace, "worker", "--partitions", "3", "--no-registry", "--quiet")

    assert code == 2, out
    assert "PartitionCountChangedError" in out
    assert "1 partition(s) and 1 carrier(s)" in out
    assert "Start with --partitions 1" in out


@requires_redis
@pytest.mark.parametrize("how", ["flag", "env"])
def test_dlq_list_covers_every_partition(namespace: str, how: str) -> None:
    executions = [
        next(f"x-{n}" for n in range(100) if partition_of(f"x-{n}", 3) == k) for k in range(3)
    ]

    async def dead_letters(client: redis.Redis, keys: RedisKeys) -> None:
        queue = RedisTaskQueue(client, keys, partitions=3)
        await queue.ensure_group()
        for execution_id in executions:
            await queue.enqueue(start(execution_id))
        for delivery in await queue.read("test", count=10, block_ms=0):
            await queue.dead_letter(delivery, "unknown_flow: no such flow")

    seed(namespace, dead_letters)
    args, env = (["--partitions", "3"], {}) if how == "flag" else ([], {"PLAITA_PARTITIONS": "3"})

    code, out = invoke(namespace, "dlq", "list", "--json", *args, env=env)

    assert code == 0, out
    listed = json.loads(out)["items"]
    assert sorted(entry["execution_id"] for entry in listed) == sorted(executions)


@requires_redis
def test_dlq_show_and_replay_find_a_dead_letter_of_any_partition(namespace: str) -> None:
    execution_id = next(f"x-{n}" for n in range(100) if partition_of(f"x-{n}", 3) == 2)

    async def dead_letter(client: redis.Redis, keys: RedisKeys) -> str:
        queue = RedisTaskQueue(client, keys, partitions=3)
        await queue.ensure_group()
        await queue.enqueue(start(execution_id))
        [delivery] = await queue.read("test", count=10, block_ms=0)
        return await queue.dead_letter(delivery, "unknown_flow: no such flow")

    dlq_id = seed(namespace, dead_letter)

    code, out = invoke(namespace, "dlq", "show", dlq_id, "--json", "--partitions", "3")
    assert code == 0, out
    assert json.loads(out)["execution_id"] == execution_id
    code, out = invoke(namespace, "dlq", "replay", dlq_id, "--json", "--partitions", "3")
    assert code == 0 and json.loads(out)["outcome"] == "replayed", out

    async def partition_lengths(client: redis.Redis, keys: RedisKeys) -> list[int]:
        return [int(await client.xlen(keys.queue_stream("default", k))) for k in range(3)]

    assert seed(namespace, partition_lengths) == [0, 0, 2], "the carrier and its replay"
