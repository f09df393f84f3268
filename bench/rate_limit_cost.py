"""What an enabled rate limit adds to a worker step, in µs and round trips (W23).

The worker step (``ProcessTask`` as ``build_container`` wires it for the Redis backend) runs
a start carrier of a chain of N no-op task nodes to its end in one dispatch, on the real
Redis at ``PLAITA_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Two flows alternate,
round after round: the chain without limits, and the same chain whose every node has a
``rate_limit`` no run reaches (one key, 10 000/s, burst 100 000: every take is admitted, so
what is measured is the take itself). One sample is a dispatch's time divided by its nodes;
the report gives the median of each flow and their difference, the cost per rate-limited
step. The round trips are counted in ``tests/contract/test_dispatch_round_trips.py`` (2).

Bounded: at most ``--rounds`` rounds, and none starts after ``--max-seconds``.

    .venv/bin/python bench/rate_limit_cost.py            # 20 nodes, about 20 s at most

Performance is measured here, never in timed unit tests (the P requirements).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import types
import uuid
from typing import Any

from dependency_injector import providers

from plaita.application.handlers import HandlerRegistry
from plaita.application.tenancy import tenant_scope
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.container import build_container
from plaita.entrypoints.settings import Settings

HANDLERS = "plaita_bench_rate"
LIMIT = {"key": "bench", "per_second": 10_000, "burst": 100_000}


async def noop(params: Any, ctx: Any) -> None:
    return None


def chain(nodes: int, *, limited: bool) -> Flow:
    ids = [f"n{i}" for i in range(nodes)]
    extra: dict[str, Any] = {"rate_limit": LIMIT} if limited else {}
    return Flow.from_document(
        {
            "flow_id": "bench_limited" if limited else "bench_plain",
            "start": ids[0],
            "nodes": [
                {"id": n, "type": "task", "handler": f"{HANDLERS}:noop", "next": after, **extra}
                for n, after in zip(ids, [*ids[1:], "done"], strict=True)
            ]
            + [{"id": "done", "type": "end"}],
        }
    )


async def main(nodes: int, rounds: int, max_seconds: float) -> dict[str, Any]:
    began = time.monotonic()
    namespace = f"bench-rate-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        backend="redis",
        redis_url=os.environ.get("PLAITA_REDIS_URL", "redis://127.0.0.1:6379/0"),
        namespace=namespace,
        handler_modules=(HANDLERS,),
    )
    container = build_container(settings)
    container.handlers.override(
        providers.Object(
            HandlerRegistry([HANDLERS], importer=lambda _: types.SimpleNamespace(noop=noop))
        )
    )
    flows = {limited: chain(nodes, limited=limited) for limited in (False, True)}
    samples: dict[bool, list[float]] = {False: [], True: []}
    client = container.redis_client()
    try:
        with tenant_scope(DEFAULT_TENANT):
            for flow in flows.values():
                await container.flows().register(flow, owner=SHARED)
            process = container.process_task()
            done = 0
            while done < rounds and (done < 3 or time.monotonic() - began < max_seconds):
                for limited, flow in flows.items():
                    envelope = TaskEnvelope.start(
                        execution_id=uuid.uuid4().hex,
                        flow_id=flow.flow_id,
                        version="1",
                        params={},
                        now_ms=container.clock().now_ms(),
                        generations=container.generations(),
                    )
                    started = time.perf_counter()
                    result = await process(envelope)
                    elapsed = time.perf_counter() - started
                    assert result.outcome == "completed", result
                    if done:  # the first round warms scripts and caches
                        samples[limited].append(elapsed * 1e6 / (nodes + 1))
                done += 1
    finally:
        keys = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
        if keys:
            await client.unlink(*keys)
        await client.aclose()
    plain, limited = (statistics.median(samples[k]) for k in (False, True))
    return {
        "nodes": nodes,
        "rounds": done - 1,
        "median_us_per_step_plain": round(plain),
        "median_us_per_step_rate_limited": round(limited),
        "rate_limit_us_per_step": round((limited - plain) * (nodes + 1) / nodes),
        "rate_limit_round_trips_per_step": 2,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments.nodes, arguments.rounds, arguments.max_seconds))
    print(json.dumps(report, indent=2))
