"""Every carrier names the rules it was written under (W12).

New carriers — written by the console/CLI use cases, the event filter, the operator controls,
the reaper, the restart recovery, and the worker's own hand-overs and timers — carry their
producer's current generations. Copies of a carrier (a node retry, a parked carrier given
back, a DLQ replay) carry their source's: a legacy source stays legacy.

Everything runs on the memory twin wired by the container, on a fake clock.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from dependency_injector import providers

from plaita.application.ports import Delivery
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.step import Disposition
from plaita.domain.envelope import (
    LEGACY_GENERATIONS,
    CarrierGenerations,
    ResumeType,
    TaskEnvelope,
)
from plaita.domain.failures import TransientNodeError
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from ..application.conftest import FakeClock, SequentialIds, handler_registry

NAP = {
    "flow_id": "nap",
    "start": "nap",
    "nodes": [
        {"id": "nap", "type": "sleep", "duration": 1000, "next": "work"},
        {"id": "work", "type": "task", "handler": "t:work", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}
WAIT = {
    "flow_id": "wait",
    "start": "wait",
    "nodes": [
        {"id": "wait", "type": "event", "event_type": "go", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}
TWO = {
    "flow_id": "two",
    "start": "first",
    "nodes": [
        {"id": "first", "type": "task", "handler": "t:work", "next": "second"},
        {"id": "second", "type": "task", "handler": "t:work", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}
FLAKY = {
    "flow_id": "flaky",
    "start": "work",
    "nodes": [
        {"id": "work", "type": "task", "handler": "t:flaky", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


def flaky(params: Any, ctx: Any) -> Any:
    raise TransientNodeError("the service is busy")


@pytest.fixture
async def container() -> Container:
    container = build_container(Settings(backend="memory", max_deliveries=3))
    container.clock.override(providers.Object(FakeClock()))
    container.ids.override(providers.Object(SequentialIds()))
    container.handlers.override(
        providers.Object(handler_registry(work=lambda params, ctx: "worked", flaky=flaky))
    )
    for document in (NAP, WAIT, TWO, FLAKY):
        await container.flows().register(Flow.from_document(document), owner=SHARED)
    await container.queue().ensure_group()
    return container


async def queued(container: Container) -> list[Delivery]:
    """Every carrier waiting in the stream, read (and acked) as a worker would."""
    deliveries = await container.queue().read("test", count=100, block_ms=1)
    for delivery in deliveries:
        await container.queue().ack(delivery.message_id)
    return deliveries


async def stamps(container: Container) -> list[CarrierGenerations]:
    return [d.envelope.generations for d in await queued(container) if d.envelope is not None]


async def run_queued(container: Container) -> None:
    """Dispatch every queued carrier once, as the worker would (ack only on ACK)."""
    for delivery in await container.queue().read("test", count=100, block_ms=1):
        assert delivery.envelope is not None
        result = await container.process_task()(delivery.envelope)
        if result.disposition is Disposition.ACK:
            await container.queue().ack(delivery.message_id)


async def started(container: Container, flow_id: str) -> str:
    with tenant_scope("default"):
        execution_id = (await container.start_execution()(flow_id)).execution_id
        await run_queued(container)
    return execution_id


async def move_timers(container: Container, seconds: float) -> None:
    clock = container.clock()
    assert isinstance(clock, FakeClock)
    clock.advance(seconds)
    await container.delay_queue().move_due(now_ms=clock.now_ms())


def legacy_start(container: Container, flow_id: str, execution_id: str) -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id=flow_id,
        version=None,
        params={},
        now_ms=container.clock().now_ms(),
        generations=LEGACY_GENERATIONS,
    )


# --- producers stamp their current generations ------------------------------------------------


async def test_a_started_execution_carrier_names_the_producers_generations(
    container: Container,
) -> None:
    """W12: the console and CLI start through StartExecution."""
    with tenant_scope("default"):
        await container.start_execution()("nap")
    current = container.generations()
    assert not current.is_legacy
    assert await stamps(container) == [current]


async def test_the_workers_timer_carrier_names_its_generations(container: Container) -> None:
    """W12: a sleep's wake-up is a new carrier the worker writes."""
    await started(container, "nap")
    await move_timers(container, 1.5)
    assert await stamps(container) == [container.generations()]


def one_node_per_dispatch(container: Container) -> None:
    settings = attrs.evolve(container.step_settings(), max_steps_per_dispatch=1)
    container.step_settings.override(providers.Object(settings))


async def test_a_hand_over_continue_names_the_workers_generations(container: Container) -> None:
    """W12: the 'yielded' continue after max_steps_per_dispatch nodes is a new carrier."""
    one_node_per_dispatch(container)
    await started(container, "two")
    assert await stamps(container) == [container.generations()]


async def test_an_event_resume_names_the_event_filters_generations(container: Container) -> None:
    """W12: the event filter (and the reconciler, through it) writes event resumes."""
    execution_id = await started(container, "wait")
    with tenant_scope("default"):
        event = await container.publish_event()("go", correlation_id=execution_id)
    assert await container.filter_event()(event.event_id) == 1
    assert await stamps(container) == [container.generations()]


async def test_operator_resume_continue_and_cancel_name_the_operators_generations(
    container: Container,
) -> None:
    """W12, W23: an operator's continue and cancel are new carriers (the console's resume
    button refuses a sleeping execution, so its continue comes through resume_execution)."""
    execution_id = await started(container, "nap")
    with tenant_scope("default"):
        await container.resume_execution()(execution_id, ResumeType.CONTINUE)
        await container.cancel_execution()(execution_id)
    assert await stamps(container) == [container.generations()] * 2


async def test_an_operator_retry_names_the_operators_generations(container: Container) -> None:
    """W23: a retry from a node restarts the execution with a new continue carrier."""
    execution_id = await started(container, "nap")
    with tenant_scope("default"):
        await container.cancel_execution()(execution_id)
    await run_queued(container)
    with tenant_scope("default"):
        result = await container.retry_execution()(execution_id, from_node="work")
    assert result.outcome == "restarted"
    assert await stamps(container) == [container.generations()]


async def test_an_unpause_without_parked_carriers_names_the_operators_generations(
    container: Container,
) -> None:
    """W23: when nothing was parked, the unpause enqueues a fresh continue."""
    execution_id = await started(container, "nap")
    with tenant_scope("default"):
        await container.pause_execution()(execution_id)
        await container.unpause_execution()(execution_id)
    assert await stamps(container) == [container.generations()]


async def test_the_reapers_requeue_names_its_generations(container: Container) -> None:
    """W19: the reaper's continue replaces a lost carrier; it is a new carrier."""
    one_node_per_dispatch(container)
    execution_id = await started(container, "two")
    assert len(await queued(container)) == 1, "its hand-over carrier, now lost"
    clock = container.clock()
    assert isinstance(clock, FakeClock)
    clock.advance(3600)
    with tenant_scope("default"):
        report = await container.reap_zombies()()
    assert [(i.execution_id, i.action.value) for i in report.items] == [(execution_id, "requeue")]
    assert await stamps(container) == [container.generations()]


async def test_restart_recovery_names_the_recovering_processes_generations(
    container: Container,
) -> None:
    """S4: after a restart lost the queue, the recovered continue and timer are new carriers."""
    await started(container, "nap")
    with tenant_scope("default"):
        report = await container.recover_after_restart()()
    assert report.timers == 1
    await move_timers(container, 1.5)
    assert set(await stamps(container)) == {container.generations()}


# --- copies inherit their source's generations -------------------------------------------------


async def test_a_retry_copy_of_a_legacy_carrier_stays_legacy(container: Container) -> None:
    """W12 rule 3: a copy is never re-stamped with this worker's values."""
    with tenant_scope("default"):
        await container.queue().enqueue(legacy_start(container, "flaky", "x-legacy"))
    for delivery in await container.queue().read("test", count=1, block_ms=1):
        assert delivery.envelope is not None
        result = await container.process_task()(delivery.envelope)
        assert result.outcome == "retry_scheduled"
        [(copy, _)] = result.schedule
        assert copy.generations == LEGACY_GENERATIONS


async def test_a_parked_carrier_comes_back_with_its_own_generations(container: Container) -> None:
    """W12 rule 3, W23: unpause gives back the very carrier that was parked."""
    execution_id = await started(container, "nap")
    with tenant_scope("default"):
        await container.pause_execution()(execution_id)
        foreign = TaskEnvelope.resume(
            execution_id=execution_id,
            flow_id="nap",
            resume_type=ResumeType.CONTINUE,
            now_ms=container.clock().now_ms(),
            generations=LEGACY_GENERATIONS,
        )
        result = await container.process_task()(foreign)
        assert result.outcome == "parked"
        await container.unpause_execution()(execution_id)
    assert await stamps(container) == [LEGACY_GENERATIONS]
