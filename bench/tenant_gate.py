"""The tenant gate's cost per dispatch on a real Redis, in µs (W24).

The worker step (``ProcessTask``) on the Redis adapters runs a flow of one no-op task node,
one dispatch per execution, in three configurations taken in turn within each round:

- ``gate off``: the tenant directory is the memory twin (no Redis read: the step as it was
  before the gate);
- ``default, no record``: the Redis tenant directory, a default-tenant execution, no status
  record (the common case: no tenant was ever suspended or given a quota);
- ``tenant with a quota``: the Redis tenant directory, an execution of a tenant whose record
  holds a quota (the record is read, parsed and decided on).

Each reports the median and p90 of its dispatch times. The gate reads the tenant's record in
the same pipeline as the dispatch's tombstone read, so it adds no round trip on one Redis
(``tests/contract/test_step_round_trips.py`` counts them); what is left is the CPU of the
read and the decision. Bounded: ``--dispatches`` per configuration after ``--warm-up``.

    .venv/bin/python bench/tenant_gate.py                    # 300 dispatches each
    .venv/bin/python bench/tenant_gate.py --redis-url redis://127.0.0.1:6379/9 --dispatches 1000

Performance is measured here, never in timed unit tests (the P requirements).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import types
import uuid
from typing import Any

import redis.asyncio as redis

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.adapters.redis.counters import RedisCounterStore
from plaita.adapters.redis.dedup import RedisDedupStore
from plaita.adapters.redis.delay_queue import RedisDelayQueue
from plaita.adapters.redis.flows import RedisFlowRepository
from plaita.adapters.redis.inbox import RedisInbox
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager
from plaita.adapters.redis.leased_load import RedisLeasedLoad
from plaita.adapters.redis.queue import RedisTaskQueue
from plaita.adapters.redis.rate_buckets import RedisRateBuckets
from plaita.adapters.redis.registry import RedisWorkerRegistry
from plaita.adapters.redis.slot_tables import RedisSlotTables
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.adapters.redis.tenants import RedisTenantDirectory
from plaita.adapters.redis.waiting_notes import RedisWaitingNotes
from plaita.adapters.system import SystemClock, UuidGenerator
from plaita.application.handlers import HandlerRegistry
from plaita.application.ports import TenantDirectory
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.step import ProcessTask, StepSettings
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenant_status import with_quota

ONE_NODE = {
    "flow_id": "bench_tenant_gate",
    "version": "1",
    "start": "a",
    "nodes": [
        {"id": "a", "type": "task", "handler": "bench:noop", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


async def noop(params: Any, ctx: Any) -> None:
    return None


def worker_step(client: redis.Redis, keys: RedisKeys, tenants: TenantDirectory) -> ProcessTask:
    handlers = HandlerRegistry(["bench"], importer=lambda _: types.SimpleNamespace(noop=noop))
    clock = SystemClock()
    return ProcessTask(
        executions=RedisExecutionRepository(client, keys),
        leases=RedisLeaseManager(client, keys),
        leased_load=RedisLeasedLoad(client, keys),
        flows=FlowCatalog(RedisFlowRepository(client, keys), handlers, clock=clock),
        queue=RedisTaskQueue(client, keys),
        subscriptions=RedisSubscriptionStore(client, keys),
        handlers=handlers,
        clock=clock,
        ids=UuidGenerator(),
        settings=StepSettings(holder_id="bench", generations=LEGACY_GENERATIONS),
        counters=RedisCounterStore(client, keys),
        delay=RedisDelayQueue(client, keys),
        registry=RedisWorkerRegistry(client, keys),
        dedup=RedisDedupStore(client, keys),
        inbox=RedisInbox(client, keys),
        controls=MemoryExecutionControls(clock),
        waiting=RedisWaitingNotes(client, keys),
        tenants=tenants,
        rate_buckets=RedisRateBuckets(client, keys),
        slots=RedisSlotTables(client, keys),
    )


async def measure(redis_url: str, dispatches: int, warm_up: int) -> dict[str, list[float]]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"plaita-bench-tenant-{uuid.uuid4().hex[:8]}")
    try:
        directory = RedisTenantDirectory(client, keys)
        await directory.write(
            with_quota(None, "acme", 500, epoch=None, now_ms=1), expected_version=0
        )
        configurations = {
            "gate off": ("default", worker_step(client, keys, MemoryTenantDirectory())),
            "default, no record": ("default", worker_step(client, keys, directory)),
            "tenant with a quota": ("acme", worker_step(client, keys, directory)),
        }
        catalog = FlowCatalog(RedisFlowRepository(client, keys), None, clock=SystemClock())
        with tenant_scope("default"):
            await catalog.register(Flow.from_document(ONE_NODE), owner=SHARED)
        times: dict[str, list[float]] = {name: [] for name in configurations}
        for n in range(warm_up + dispatches):
            for name, (tenant, step) in configurations.items():
                carrier = TaskEnvelope.start(
                    execution_id=f"{name.replace(' ', '-').replace(',', '')}-{n}",
                    flow_id=ONE_NODE["flow_id"],
                    version="1",
                    params={},
                    now_ms=SystemClock().now_ms(),
                    generations=LEGACY_GENERATIONS,
                    tenant_id=tenant,
                )
                began = time.perf_counter()
                result = await step(carrier)
                elapsed = time.perf_counter() - began
                if result.outcome != "completed":
                    raise SystemExit(
                        f"{name}: the dispatch ended {result.outcome}: {result.detail}"
                    )
                if n >= warm_up:
                    times[name].append(elapsed)
        return times
    finally:
        created = [key async for key in client.scan_iter(match=f"{keys.namespace}*", count=1000)]
        if created:
            await client.delete(*created)
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--dispatches", type=int, default=300)
    parser.add_argument("--warm-up", type=int, default=20)
    options = parser.parse_args()
    times = asyncio.run(measure(options.redis_url, options.dispatches, options.warm_up))
    baseline = statistics.median(times["gate off"])
    print(f"{'configuration':<22} {'median µs':>10} {'p90 µs':>10} {'vs off µs':>10}")
    for name, samples in times.items():
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else median
        extra = (median - baseline) * 1e6
        print(f"{name:<22} {median * 1e6:>10.0f} {p90 * 1e6:>10.0f} {extra:>+10.0f}")


if __name__ == "__main__":
    main()
