"""What reading a queue partition's three priority streams costs against one stream.

In a fresh namespace on a real Redis, ``--carriers`` normal carriers are read one at a time
and acked, once with ``XREADGROUP`` on the normal stream alone (what a read sent before
priorities) and once with the one ``XREADGROUP`` over the high, normal and low streams the
task queue sends now; ``--rounds`` interleaved rounds, the median per read + ack in µs. The
namespace is deleted at the end.

    .venv/bin/python bench/priority_reads.py                       # 7 rounds of 1,000
    .venv/bin/python bench/priority_reads.py --redis-url redis://127.0.0.1:6379 --rounds 3

Performance is measured here, never in timed unit tests (the P requirements).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue_priorities import PriorityStreams
from plaita.domain.priorities import PRIORITIES, Priority

GROUP = "bench"


async def one_round(streams: PriorityStreams, *, three: bool, carriers: int) -> float:
    normal = streams.by_level[Priority.NORMAL]
    for _ in range(carriers):
        await normal.add({"envelope": "{}", "schema_version": "1"})
    began = time.perf_counter()
    for _ in range(carriers):
        if three:
            [(message_id, _fields)] = await streams.read("w", count=1, block_ms=0)
        else:
            [(message_id, _fields)] = await normal.read("w", start=">", count=1, block_ms=0)
        await normal.ack(message_id)
    return (time.perf_counter() - began) / carriers * 1e6


async def main(url: str, rounds: int, carriers: int) -> None:
    client = redis.Redis.from_url(url)
    keys = RedisKeys(f"bench-priorities-{uuid.uuid4().hex[:8]}")
    try:
        streams = PriorityStreams(
            client,
            {level: keys.queue_stream("default", None, level) for level in PRIORITIES},
            GROUP,
        )
        await streams.ensure_group()
        timings: dict[str, list[float]] = {"one stream": [], "three streams": []}
        for _ in range(rounds):
            for label in timings:
                three = label == "three streams"
                timings[label].append(await one_round(streams, three=three, carriers=carriers))
        for label, values in timings.items():
            shown = ", ".join(f"{value:.0f}" for value in values)
            print(f"{label}: median {statistics.median(values):.0f} µs per read + ack ({shown})")
    finally:
        async for key in client.scan_iter(match=f"{keys.namespace}:*"):
            await client.delete(key)
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--carriers", type=int, default=1000)
    options = parser.parse_args()
    asyncio.run(main(options.redis_url, options.rounds, options.carriers))
