"""Redis round trips of the whole worker step, counted on the wire (P2 — a test).

The worker step (``ProcessTask``) runs a chain of N no-op task nodes in one dispatch on the
Redis adapters. The difference between a 20-node and a 10-node chain, divided by 10, is
what one steady-state step — a task node following a task node — costs: the dispatch's
fixed costs (lease, load, counters, release) cancel out.

The operator pause gate (W23, ADR 0008) reads the control flags once per dispatch, before
the lease: one more round trip per dispatch, none per step — measured against the same step
with the memory twin's controls, which answer without touching Redis.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis

from plaita.adapters.memory.controls import MemoryExecutionControls
from plaita.adapters.memory.slot_tables import MemorySlotTables
from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.adapters.redis.controls import RedisExecutionControls
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
from plaita.adapters.redis.storage import RedisExecutionRepository
from plaita.adapters.redis.subscriptions import RedisSubscriptionStore
from plaita.adapters.redis.tenants import RedisTenantDirectory
from plaita.adapters.redis.waiting_notes import RedisWaitingNotes
from plaita.adapters.system import SystemClock, UuidGenerator
from plaita.application.handlers import HandlerRegistry
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.dedup_claims import DedupClaims
from plaita.application.use_cases.flows import FlowCatalog
from plaita.application.use_cases.start_execution import StartExecution
from plaita.application.use_cases.step import ProcessTask, StepSettings
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenancy import DEFAULT_TENANT

from .test_checkpoint_costs import Wire, wired_fake_redis, wired_real_redis

#: P2: at most this many round trips per steady-state step.
MAX_ROUND_TRIPS_PER_STEP = 2
#: W23: what the pause gate (one EVALSHA reading the flags, parking when paused) adds to a
#: dispatch; a step adds nothing.
PAUSE_GATE_ROUND_TRIPS_PER_DISPATCH = 1
#: W24: what the tenant gate (its record and parked count) adds to a dispatch of a tenant
#: without a record: nothing on one Redis, where it is read in the pipeline of the tombstone
#: read; on a cluster at most one request, to another node, sent at the same time (no longer
#: wait); a step adds nothing.
TENANT_GATE_ROUND_TRIPS_PER_DISPATCH = 0


def chain(length: int) -> Flow:
    nodes: list[dict[str, Any]] = [
        {"id": f"n{i}", "type": "task", "handler": "bench:noop", "next": f"n{i + 1}"}
        for i in range(length)
    ]
    nodes.append({"id": f"n{length}", "type": "end"})
    return Flow.from_document(
        {"flow_id": f"chain{length}", "version": "1", "start": "n0", "nodes": nodes}
    )


async def noop(params: Any, ctx: Any) -> None:
    return None


def worker_step(
    client: redis.Redis, keys: RedisKeys, *, controls: bool = False, tenants: bool = False
) -> tuple[ProcessTask, FlowCatalog]:
    handlers = HandlerRegistry(["bench"], importer=lambda _: types.SimpleNamespace(noop=noop))
    clock = SystemClock()
    catalog = FlowCatalog(RedisFlowRepository(client, keys), handlers, clock=clock)
    queue = RedisTaskQueue(client, keys)
    step = ProcessTask(
        executions=RedisExecutionRepository(client, keys),
        leases=RedisLeaseManager(client, keys),
        leased_load=RedisLeasedLoad(client, keys),
        flows=catalog,
        queue=queue,
        subscriptions=RedisSubscriptionStore(client, keys),
        handlers=handlers,
        clock=clock,
        ids=UuidGenerator(),
        settings=StepSettings(holder_id="w1", generations=LEGACY_GENERATIONS),
        counters=RedisCounterStore(client, keys),
        delay=RedisDelayQueue(client, keys),
        registry=RedisWorkerRegistry(client, keys),
        dedup=RedisDedupStore(client, keys),
        inbox=RedisInbox(client, keys),
        controls=RedisExecutionControls(client, keys)
        if controls
        else MemoryExecutionControls(clock),
        slots=MemorySlotTables(),
        waiting=RedisWaitingNotes(client, keys),
        tenants=RedisTenantDirectory(client, keys) if tenants else MemoryTenantDirectory(),
        rate_buckets=RedisRateBuckets(client, keys),
    )
    return step, catalog


class StepRoundTrips:
    #: Writes one checkpoint save sends: its script and the index update, pipelined.
    SAVE_WRITES = 1
    #: Requests a pipeline of two hash tags may need beyond one: a cluster sends each node
    #: its own, at the same time.
    OTHER_NODE = 0

    @pytest.fixture
    def wire(self) -> Wire:
        return Wire()

    @pytest.fixture
    def client(self, wire: Wire) -> redis.Redis:
        raise NotImplementedError

    def execution_id(self, base: str) -> str:
        """The id a measured dispatch runs under (the cluster picks where it lands)."""
        return base

    def acceptance_writes(self, execution_id: str) -> int:
        """Writes of an acceptance (a full save): the script, the index update and the
        janitor's registry of indexes, pipelined — one write on a single Redis."""
        return self.SAVE_WRITES

    async def dispatch_round_trips(
        self, step: ProcessTask, catalog: FlowCatalog, wire: Wire, length: int, prefix: str = ""
    ) -> int:
        flow = (await catalog.register(chain(length), owner=SHARED)).flow
        now = SystemClock().now_ms()
        warm = TaskEnvelope.start(
            execution_id=self.execution_id(f"{prefix}warm-{length}"),
            flow_id=flow.flow_id,
            version="1",
            params={},
            now_ms=now,
            generations=LEGACY_GENERATIONS,
        )
        await step(warm)  # loads the scripts and caches the flow
        envelope = TaskEnvelope.start(
            execution_id=self.execution_id(f"{prefix}x-{length}"),
            flow_id=flow.flow_id,
            version="1",
            params={},
            now_ms=now,
            generations=LEGACY_GENERATIONS,
        )
        wire.clear()
        result = await step(envelope)
        assert result.outcome == "completed"
        return wire.round_trips

    async def test_a_steady_state_step_costs_at_most_two_round_trips(
        self, client: redis.Redis, keys: RedisKeys, wire: Wire, request: pytest.FixtureRequest
    ) -> None:
        """P2: a task node after a task node in one dispatch: ≤ 2 Redis round trips."""
        step, catalog = worker_step(client, keys)
        short = await self.dispatch_round_trips(step, catalog, wire, 10)
        long = await self.dispatch_round_trips(step, catalog, wire, 20)
        per_step = (long - short) / 10
        request.node.user_properties.append(("round_trips_per_step", per_step))
        print(f"round_trips_per_step={per_step} dispatch_10={short} dispatch_20={long}")
        assert per_step <= MAX_ROUND_TRIPS_PER_STEP

    async def test_the_pause_gate_costs_one_round_trip_per_dispatch_and_none_per_step(
        self, client: redis.Redis, keys: RedisKeys, wire: Wire, request: pytest.FixtureRequest
    ) -> None:
        """W23: the control flags are read once per dispatch, never per step (P2 unchanged)."""
        plain, catalog = worker_step(client, keys)
        gated, _ = worker_step(client, keys, controls=True)
        plain_10 = await self.dispatch_round_trips(plain, catalog, wire, 10, "plain-")
        gated_10 = await self.dispatch_round_trips(gated, catalog, wire, 10, "gated-")
        gated_20 = await self.dispatch_round_trips(gated, catalog, wire, 20, "gated-")
        per_step = (gated_20 - gated_10) / 10
        request.node.user_properties.append(("gated_dispatch_10", gated_10))
        print(f"dispatch_10={plain_10} gated_dispatch_10={gated_10} gated_per_step={per_step}")
        assert gated_10 - plain_10 == PAUSE_GATE_ROUND_TRIPS_PER_DISPATCH
        assert per_step <= MAX_ROUND_TRIPS_PER_STEP

    async def test_the_tenant_gate_costs_one_round_trip_per_dispatch_and_none_per_step(
        self, client: redis.Redis, keys: RedisKeys, wire: Wire, request: pytest.FixtureRequest
    ) -> None:
        """W24: the tenant's record is read once per dispatch, beside the tombstone read,
        never per step."""
        plain, catalog = worker_step(client, keys)
        gated, _ = worker_step(client, keys, tenants=True)
        plain_10 = await self.dispatch_round_trips(plain, catalog, wire, 10, "plain-")
        gated_10 = await self.dispatch_round_trips(gated, catalog, wire, 10, "tenant-")
        gated_20 = await self.dispatch_round_trips(gated, catalog, wire, 20, "tenant-")
        per_step = (gated_20 - gated_10) / 10
        request.node.user_properties.append(("tenant_gated_dispatch_10", gated_10))
        print(f"dispatch_10={plain_10} tenant_gated_10={gated_10} tenant_per_step={per_step}")
        assert gated_10 - plain_10 <= TENANT_GATE_ROUND_TRIPS_PER_DISPATCH + self.OTHER_NODE
        assert per_step <= MAX_ROUND_TRIPS_PER_STEP

    async def test_an_accepted_start_costs_two_round_trips_and_its_pickup_one_save(
        self, client: redis.Redis, keys: RedisKeys, wire: Wire, request: pytest.FixtureRequest
    ) -> None:
        """ADR 0022: a start stores the pending state (one round trip: the save script and
        the index update in one pipeline) and enqueues (one); the dispatch that takes it up
        writes ``running`` once before the start node — one save per execution, not per step."""
        step, catalog = worker_step(client, keys)
        flow = (await catalog.register(chain(3), owner=SHARED)).flow
        queue = RedisTaskQueue(client, keys)
        executions = RedisExecutionRepository(client, keys)
        start = StartExecution(
            flows=catalog,
            queue=queue,
            claims=DedupClaims(dedup=RedisDedupStore(client, keys), executions=executions),
            executions=executions,
            clock=SystemClock(),
            ids=UuidGenerator(),
            generations=LEGACY_GENERATIONS,
        )
        await queue.ensure_group()

        async def accept_and_run(base: str) -> tuple[int, int]:
            wire.clear()
            started = await start(flow.flow_id, execution_id=self.execution_id(base))
            start_round_trips = wire.round_trips
            delivered = {
                d.envelope.execution_id: d.envelope
                for d in await queue.read("rt", count=10, block_ms=1)
                if d.envelope is not None
            }
            wire.clear()
            assert (await step(delivered[started.execution_id])).outcome == "completed"
            return start_round_trips, wire.round_trips

        await accept_and_run("warm-accepted")  # loads the scripts and caches the flow
        start_round_trips, accepted_dispatch = await accept_and_run("accepted-1")
        bare = await self.dispatch_round_trips(step, catalog, wire, 3, "bare-")
        request.node.user_properties.append(("start_round_trips", start_round_trips))
        print(f"start={start_round_trips} pickup_dispatch={accepted_dispatch} bare={bare}")
        accepted = self.acceptance_writes(self.execution_id("accepted-1"))
        assert start_round_trips == accepted + 1  # the acceptance, the enqueue
        # The pickup's save; and the bare dispatch's first checkpoint was a full save (with
        # the registry write), which the accepted one's first checkpoint no longer is.
        assert accepted_dispatch - bare == 2 * self.SAVE_WRITES - accepted


class TestFakeRedisStepRoundTrips(StepRoundTrips):
    @pytest.fixture
    async def client(self, wire: Wire) -> AsyncIterator[redis.Redis]:
        async with wired_fake_redis(wire) as client:
            yield client


@pytest.mark.redis
class TestRedisStepRoundTrips(StepRoundTrips):
    @pytest.fixture
    async def client(self, wire: Wire, keys: RedisKeys) -> AsyncIterator[redis.Redis]:
        async with wired_real_redis(wire, keys) as client:
            yield client


@pytest.mark.redis
class TestRedisClusterStepRoundTrips(StepRoundTrips):
    """The same step on the 3-master cluster: P2 holds (the checkpoint's script and index
    update may be two writes to two nodes, sent concurrently)."""

    SAVE_WRITES = 2
    OTHER_NODE = 1

    @pytest.fixture
    async def client(self, wire: Wire, keys: RedisKeys) -> AsyncIterator[redis.Redis]:
        async with wired_real_redis(wire, keys, "cluster") as client:
            self._cluster: Any = client
            self._keys = keys
            yield client

    def execution_id(self, base: str) -> str:
        """An id whose keys live on another node than the executions index: the dearer case,
        where each checkpoint is one write to each of two nodes. Every measured dispatch
        lands the same way, so the fixed costs still cancel out."""

        node_of = self._node_of
        with tenant_scope(DEFAULT_TENANT):
            index = node_of(self._keys.executions())
            # Always the same other node, so no measured dispatch opens a new connection.
            primaries = self._cluster.nodes_manager.get_nodes_by_server_type("primary")
            target = min(str(node.name) for node in primaries if node.name != index)
            for suffix in range(1000):
                candidate = f"{base}-{suffix}"
                if node_of(self._keys.execution_state(candidate)) == target:
                    return candidate
        raise AssertionError("no execution id lands apart from the index in 1000 tries")

    def acceptance_writes(self, execution_id: str) -> int:
        """One write to each node the acceptance touches: the execution's, the index's and
        the registry's of indexes (the namespace decides whether the last two share one)."""
        with tenant_scope(DEFAULT_TENANT):
            keys = (
                self._keys.execution_state(execution_id),
                self._keys.executions(),
                self._keys.execution_indexes(),
            )
            return len({self._node_of(key) for key in keys})

    def _node_of(self, key: str) -> str:
        return str(self._cluster.nodes_manager.get_node_from_slot(self._cluster.keyslot(key)).name)
