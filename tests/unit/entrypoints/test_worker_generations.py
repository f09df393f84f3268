"""The worker never applies its rules to a carrier written under another pool's (W12).

A carrier of another config family or budget generation is left pending with a named event,
on first read and on reclaim alike — in particular a reclaimed one is never dead-lettered for
exceeding *this* worker's max deliveries: its own pool's budget decides (A2R31).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from dependency_injector import providers

from plaita.application.tenancy import tenant_scope
from plaita.domain.config_generations import BUDGET_STALE_EVENT, FAMILY_MISMATCH_EVENT
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings
from plaita.entrypoints.worker import Worker

from ..application.conftest import FakeClock

CLAIM_MIN_IDLE_MS = 1_000


def pool(**settings: object) -> Container:
    settings = {
        "consumer_name": "w-b",
        "read_block_ms": 10,
        "claim_min_idle_ms": CLAIM_MIN_IDLE_MS,
        **settings,
    }
    container = build_container(Settings(backend="memory", **settings))  # type: ignore[arg-type]
    container.clock.override(providers.Object(FakeClock()))
    return container


def carrier(container: Container, generations: CarrierGenerations) -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id="x-1",
        flow_id="f",
        resume_type=ResumeType.CONTINUE,
        now_ms=container.clock().now_ms(),
        generations=generations,
    )


def worker(container: Container) -> Worker:
    """A worker of ``container``'s pool (its budget, max deliveries included, is the pool's)."""
    return container.worker()


async def delivered_three_times(container: Container, envelope: TaskEnvelope) -> None:
    """The carrier was read and twice reclaimed elsewhere; now it is idle again."""
    queue, clock = container.queue(), container.clock()
    assert isinstance(clock, FakeClock)
    await queue.enqueue(envelope)
    await queue.read("w-a", count=1, block_ms=1)
    for _ in range(2):
        clock.advance(2 * CLAIM_MIN_IDLE_MS / 1000)
        assert await queue.reclaim("w-a", min_idle_ms=CLAIM_MIN_IDLE_MS, count=1)
    clock.advance(2 * CLAIM_MIN_IDLE_MS / 1000)


async def run_briefly(subject: Worker) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(subject.run(stop))
    await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(running, 5)


@pytest.mark.parametrize(
    ("producer", "event"),
    [
        ({"lease_ttl_seconds": 30.0}, BUDGET_STALE_EVENT),
        ({"max_deliveries": 9}, BUDGET_STALE_EVENT),
        ({"queue_name": "default", "consumer_group": "other-pool"}, FAMILY_MISMATCH_EVENT),
    ],
)
async def test_a_reclaimed_foreign_carrier_stays_pending_past_this_workers_max_deliveries(
    producer: dict[str, object], event: str, caplog: pytest.LogCaptureFixture
) -> None:
    """W12: this worker's budget (max deliveries 1) never dead-letters another pool's carrier."""
    container = pool(max_deliveries=1)
    foreign = carrier(container, pool(**producer).generations())
    await delivered_three_times(container, foreign)

    with caplog.at_level(logging.WARNING), tenant_scope("default"):
        await run_briefly(worker(container))

    assert await container.queue().dead_letters() == []
    assert (await container.queue().stats()).pending == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"event={event}")]
    assert lines and "x-1" in lines[0], [r.getMessage() for r in caplog.records]


async def test_a_foreign_carrier_is_left_pending_on_first_read_with_the_named_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """W12: the named event says which generation differs and what to do."""
    container = pool()
    await container.queue().enqueue(carrier(container, pool(max_deliveries=9).generations()))

    with caplog.at_level(logging.WARNING):
        await run_briefly(worker(container))

    assert (await container.queue().stats()).pending == 1
    [line] = [r.getMessage() for r in caplog.records if BUDGET_STALE_EVENT in r.getMessage()][:1]
    assert line.startswith(f"event={BUDGET_STALE_EVENT} ")
    assert container.generations().budget_generation in line
    assert "drain the old pool" in line
