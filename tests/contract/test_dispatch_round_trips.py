"""What one dispatch of the worker step costs on the wire, counted, not timed (P2).

The worker step — ``ProcessTask`` as ``build_container`` wires it for the Redis backend,
with the registry, the dead-letter guard and the pause gate — runs a start carrier of a
chain of N no-op task nodes to its end on the real Redis at ``PLAITA_TEST_REDIS_URL``; a
recording connection counts every write to the socket (one write is one round trip, a
pipeline is one write; see ``test_checkpoint_costs``). Two chains, of 1 and of 6 nodes, part
the cost in two:

- per step (each further node): ``STEP_ROUND_TRIPS``, its checkpoint (P2 allows two);
- per dispatch: ``DISPATCH_ROUND_TRIPS`` — the tombstone GET, the pause gate's script, the
  lease and the checkpoint read under it (one script, ``LeasedLoad``), the attempt's begin
  and end scripts, the end notice's PUBLISH and the lease release. (The worker loop's XACK
  comes on top, outside the step.)

A lone dispatch pays each of them; concurrent dispatches share them, since the commands due
in one event-loop tick leave as one pipeline (``TickPipeline``), but each still waits for
one round trip of its own, which is what is counted here.

A node with a ``rate_limit`` (W23) adds ``RATE_LIMIT_ROUND_TRIPS`` to its step when its
bucket admits it: the bucket's GET and the compare-and-set script that moves it on. (A take
that is denied writes nothing: its GET is all it costs.)

Both are today's figures: a change that adds a round trip fails here and must say why.
Folding the tombstone and the pause gate into that script too would cut two more.

A flow with a concurrency limit (E1a) adds ``SLOT_ROUND_TRIPS`` per dispatch: the slot
table's read and its compare-and-set when the slot is taken, and again when it is released
after the lease. A flow without one adds nothing (the 7 above).
"""

from __future__ import annotations

import os
import types
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from dependency_injector import providers
from redis.asyncio.connection import Connection

from plaita.application.handlers import HandlerRegistry
from plaita.application.tenancy import tenant_scope
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from .conftest import REDIS_URL_VARIABLE, real_redis_client
from .test_checkpoint_costs import Wire, recording, report

#: Round trips a further node of a steady chain adds: its checkpoint (P2: at most 2).
STEP_ROUND_TRIPS = 1
#: Round trips of one dispatch beyond its steps' checkpoints.
DISPATCH_ROUND_TRIPS = 7
#: Round trips a concurrency limit adds to a dispatch: take (read, write), release (same).
SLOT_ROUND_TRIPS = 4
#: Round trips a rate limit adds to a step whose bucket admits it (W23).
RATE_LIMIT_ROUND_TRIPS = 2
#: A limit no test chain reaches: every take is admitted.
GENEROUS_LIMIT = {"key": "cost", "per_second": 10_000, "burst": 100_000}
HANDLERS = "plaita_cost_noop"


async def noop(params: Any, ctx: Any) -> None:
    return None


def chain(
    nodes: int, *, rate_limit: dict[str, Any] | None = None, concurrency: bool = False
) -> Flow:
    ids = [f"n{i}" for i in range(nodes)]
    limit = {} if rate_limit is None else {"rate_limit": rate_limit}
    slots = {"concurrency": {"key": "${input.get('customer', 'all')}", "limit": 2}}
    suffix = ("" if rate_limit is None else "_limited") + ("_slots" if concurrency else "")
    return Flow.from_document(
        {
            "flow_id": f"cost_chain_{nodes}{suffix}",
            "version": "1",
            "start": ids[0],
            **(slots if concurrency else {}),
            "nodes": [
                {
                    "id": node,
                    "type": "task",
                    "handler": f"{HANDLERS}:noop",
                    "next": following,
                    **limit,
                }
                for node, following in zip(ids, [*ids[1:], "done"], strict=True)
            ]
            + [{"id": "done", "type": "end"}],
        }
    )


@pytest.fixture
def wire() -> Wire:
    return Wire()


@pytest.fixture
async def container(wire: Wire) -> AsyncIterator[Container]:
    client = real_redis_client(
        "node", decode_responses=True, connection_class=recording(Connection, wire)
    )
    namespace = f"cost-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        backend="redis",
        redis_url=os.environ[REDIS_URL_VARIABLE],
        namespace=namespace,
        handler_modules=(HANDLERS,),
    )
    built = build_container(settings)
    built.redis_client.override(providers.Object(client))
    built.handlers.override(
        providers.Object(
            HandlerRegistry([HANDLERS], importer=lambda _: types.SimpleNamespace(noop=noop))
        )
    )
    try:
        yield built
    finally:
        keys = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
        if keys:
            await client.unlink(*keys)
        await client.aclose()


async def dispatch_round_trips(
    container: Container,
    wire: Wire,
    nodes: int,
    *,
    rate_limit: dict[str, Any] | None = None,
    concurrency: bool = False,
) -> int:
    """Round trips of the dispatch of a start carrier that runs ``nodes`` nodes to the end;
    the second of two such dispatches, so scripts are loaded and caches warm."""
    flow = chain(nodes, rate_limit=rate_limit, concurrency=concurrency)
    with tenant_scope(DEFAULT_TENANT):
        await container.flows().register(flow, owner=SHARED)
        process = container.process_task()
        counts = []
        for _ in range(2):
            envelope = TaskEnvelope.start(
                execution_id=uuid.uuid4().hex,
                flow_id=flow.flow_id,
                version="1",
                params={},
                now_ms=container.clock().now_ms(),
                generations=container.generations(),
            )
            wire.clear()
            result = await process(envelope)
            assert result.outcome == "completed", result
            counts.append(wire.round_trips)
    return counts[-1]


async def test_a_dispatch_costs_a_fixed_number_of_round_trips_and_two_per_step(
    container: Container, wire: Wire, request: pytest.FixtureRequest
) -> None:
    one = await dispatch_round_trips(container, wire, 1)
    six = await dispatch_round_trips(container, wire, 6)
    per_step = (six - one) / 5
    fixed = one - per_step * 2  # the 1-node chain runs two nodes: the task and the end
    report(
        request,
        round_trips_1_node=one,
        round_trips_6_nodes=six,
        per_step_x10=round(per_step * 10),
        per_dispatch=round(fixed),
    )
    assert per_step == STEP_ROUND_TRIPS
    assert round(fixed) == DISPATCH_ROUND_TRIPS


async def test_a_concurrency_limit_adds_four_round_trips_per_dispatch_and_none_per_step(
    container: Container, wire: Wire, request: pytest.FixtureRequest
) -> None:
    plain = await dispatch_round_trips(container, wire, 6)
    limited = await dispatch_round_trips(container, wire, 6, concurrency=True)
    report(request, round_trips_6_nodes=plain, round_trips_6_nodes_limited=limited)
    assert limited - plain == SLOT_ROUND_TRIPS


async def test_a_rate_limit_adds_two_round_trips_to_a_step_it_admits(
    container: Container, wire: Wire, request: pytest.FixtureRequest
) -> None:
    """W23: the bucket's GET and its compare-and-set, per rate-limited node that runs."""
    plain = await dispatch_round_trips(container, wire, 6)
    limited = await dispatch_round_trips(container, wire, 6, rate_limit=GENEROUS_LIMIT)
    per_step = (limited - plain) / 6
    report(request, round_trips_6_nodes=plain, round_trips_6_limited_nodes=limited)
    assert per_step == RATE_LIMIT_ROUND_TRIPS
