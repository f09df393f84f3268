"""Tenant lifecycle and quota on the memory twin, through the worker step (W24, I0, W2).

The world is the DI container on the memory backend with a fake clock and in-test handlers,
so the tenant use cases and the worker's tenant gate are wired as the CLI and the console
wire them.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
from dependency_injector import providers

from plaita.adapters.memory.tenants import MemoryTenantDirectory
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.reap import ReapAction
from plaita.application.use_cases.step import Disposition
from plaita.application.use_cases.step.dispatch import Carrier
from plaita.application.use_cases.step.tenant_gate import PARK_ATTEMPTS, TenantGate
from plaita.application.use_cases.tenants import WRITE_ATTEMPTS, ResumeTenant
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.errors import (
    InvalidTenantQuotaError,
    TenantActionRefusedError,
    TenantWriteConflictError,
)
from plaita.domain.execution import ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_control import WaitReason
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenant_status import (
    STRANDED_GRACE_MS,
    TenantRecord,
    TenantStatus,
    resumed,
    suspended,
)
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

from .conftest import FakeClock, SequentialIds, handler_registry

S = ExecutionStatus
WORK = {
    "flow_id": "work",
    "version": "1",
    "start": "a",
    "nodes": [
        {"id": "a", "type": "task", "handler": "t:a", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}
WAITING = {
    "flow_id": "waiting",
    "version": "1",
    "start": "a",
    "nodes": [
        {"id": "a", "type": "task", "handler": "t:a", "next": "wait"},
        {"id": "wait", "type": "event", "event_type": "go", "next": "done"},
        {"id": "done", "type": "end"},
    ],
}


@attrs.define
class World:
    container: Container
    clock: FakeClock
    runs: list[str] = attrs.field(factory=list)

    async def start(self, tenant_id: str, execution_id: str, flow_id: str = "work") -> None:
        with tenant_scope(tenant_id):
            await self.container.start_execution()(
                flow_id, execution_id=execution_id, tenant_id=tenant_id
            )

    async def drain(self) -> list[str]:
        """Dispatch every queued carrier as a worker would (ack only on ACK)."""
        queue = self.container.queue()
        outcomes: list[str] = []
        for _ in range(20):
            deliveries = await queue.read("worker", count=100, block_ms=1)
            if not deliveries:
                return outcomes
            for delivery in deliveries:
                assert delivery.envelope is not None
                result = await self.container.process_task()(
                    delivery.envelope, message_id=delivery.message_id
                )
                outcomes.append(result.outcome)
                if result.disposition is Disposition.ACK:
                    await queue.ack(delivery.message_id)
        raise AssertionError(f"the queue never drained: {outcomes}")

    async def status(self, tenant_id: str, execution_id: str) -> ExecutionStatus:
        with tenant_scope(tenant_id):
            state = await self.container.executions().load(execution_id)
        assert state is not None
        return state.status


async def make_world(clock: FakeClock, ids: SequentialIds, **settings: Any) -> World:
    container = build_container(Settings(backend="memory", consumer_name="w1", **settings))
    world = World(container, clock)

    def handler(params: Any, ctx: Any) -> Any:
        world.runs.append("a")
        return {"ok": True}

    container.clock.override(providers.Object(clock))
    container.ids.override(providers.Object(ids))
    container.handlers.override(providers.Object(handler_registry(a=handler)))
    for document in (WORK, WAITING):
        await container.flows().register(Flow.from_document(document), owner=SHARED)
    await container.queue().ensure_group()
    return world


@pytest.fixture
async def world(clock: FakeClock, ids: SequentialIds) -> World:
    return await make_world(clock, ids)


@pytest.fixture
async def epoch_world(clock: FakeClock, ids: SequentialIds) -> World:
    """A deployment of epoch 3 (PLAITA_DEPLOYMENT_EPOCH=3)."""
    return await make_world(clock, ids, deployment_epoch=3)


# --- suspend and resume --------------------------------------------------------------------


async def test_a_suspended_tenants_start_is_accepted_held_and_runs_after_resume(
    world: World,
) -> None:
    suspended_now = await world.container.suspend_tenant()("acme")
    assert suspended_now.outcome == "suspended"

    await world.start("acme", "x-1")
    await world.start("acme", "x-2")
    assert await world.drain() == ["tenant_suspended", "tenant_suspended"]
    assert world.runs == []
    assert await world.status("acme", "x-1") is S.PENDING
    view = await world.container.show_tenant()("acme")
    assert (view.to_json()["status"], view.parked) == ("suspended", 2)

    result = await world.container.resume_tenant()("acme")

    assert (result.outcome, result.requeued, result.parked) == ("resumed", 2, 0)
    assert await world.drain() == ["completed", "completed"]
    assert await world.status("acme", "x-2") is S.COMPLETED


async def test_a_suspended_tenants_resume_carrier_is_parked_and_counted(world: World) -> None:
    await world.start("acme", "x-1", "waiting")
    assert await world.drain() == ["suspended"]
    await world.container.suspend_tenant()("acme")
    with tenant_scope("acme"):
        event = await world.container.publish_event()(
            "go", data={}, correlation_id="x-1", tenant_id="acme"
        )
    assert await world.container.filter_event()(event.event_id) == 1

    deliveries = await world.container.queue().read("worker", count=10, block_ms=1)
    [delivery] = deliveries
    assert delivery.envelope is not None
    result = await world.container.process_task()(delivery.envelope, message_id=delivery.message_id)

    assert (result.disposition, result.outcome) == (Disposition.ACK, "tenant_suspended")
    assert result.waited is WaitReason.TENANT_SUSPENDED
    with tenant_scope("acme"):
        note = await world.container.waiting_notes().get("x-1")
    assert note is not None and note.reason is WaitReason.TENANT_SUSPENDED
    assert note.key == "acme" and "plaita tenants resume acme" in note.detail


async def test_resume_clears_the_waiting_notes_of_what_it_released(world: World) -> None:
    await world.container.suspend_tenant()("acme")
    await world.start("acme", "x-1")
    await world.drain()

    await world.container.resume_tenant()("acme")

    with tenant_scope("acme"):
        assert await world.container.waiting_notes().get("x-1") is None


async def test_a_cancel_of_a_suspended_tenants_execution_still_runs(world: World) -> None:
    await world.start("acme", "x-1", "waiting")
    assert await world.drain() == ["suspended"]
    await world.container.suspend_tenant()("acme")
    with tenant_scope("acme"):
        await world.container.cancel_execution()("x-1")

    assert await world.drain() == ["cancelled"]
    assert await world.status("acme", "x-1") is S.CANCELLED


async def test_another_tenant_runs_while_one_is_suspended(world: World) -> None:
    await world.container.suspend_tenant()("acme")
    await world.start("globex", "x-1")
    await world.start("default", "x-2")

    assert await world.drain() == ["completed", "completed"]


async def test_suspending_twice_is_a_no_op_and_resuming_an_active_tenant_too(
    world: World,
) -> None:
    assert (await world.container.suspend_tenant()("acme")).outcome == "suspended"
    again = await world.container.suspend_tenant()("acme")
    assert (again.outcome, again.record.version) == ("already_suspended", 1)
    assert (await world.container.resume_tenant()("acme")).outcome == "resumed"
    assert (await world.container.resume_tenant()("acme")).outcome == "already_active"


async def test_the_default_tenant_cannot_be_suspended(world: World) -> None:
    with pytest.raises(TenantActionRefusedError, match="cannot be suspended"):
        await world.container.suspend_tenant()("default")
    assert await world.container.tenants().get("default") is None


async def test_resume_enqueues_each_batch_before_forgetting_it(
    world: World, clock: FakeClock
) -> None:
    """I0: a resume that dies after an enqueue leaves that carrier parked too (a duplicate at
    worst), never forgotten and not enqueued."""
    await world.container.suspend_tenant()("acme")
    for n in range(3):
        await world.start("acme", f"x-{n}")
    await world.drain()

    class Dying:
        def __init__(self) -> None:
            self.sent: list[TaskEnvelope] = []

        async def enqueue(self, envelope: TaskEnvelope) -> str:
            if len(self.sent) == 1:
                raise ConnectionError("the queue went away")
            self.sent.append(envelope)
            return "1-0"

    dying = Dying()
    resume = ResumeTenant(
        directory=world.container.tenants(),
        queue=dying,  # type: ignore[arg-type]
        waiting=world.container.waiting_notes(),
        clock=clock,
        deployment_epoch=None,
        batch=2,
    )
    with pytest.raises(ConnectionError):
        await resume("acme")

    assert await world.container.tenants().parked_count("acme") == 3
    assert [e.execution_id for e in dying.sent] == ["x-0"]
    again = await world.container.resume_tenant()("acme")
    assert (again.outcome, again.requeued) == ("already_active", 3)


async def test_resume_releases_in_batches(world: World, clock: FakeClock) -> None:
    await world.container.suspend_tenant()("acme")
    for n in range(5):
        await world.start("acme", f"x-{n}")
    await world.drain()
    resume = ResumeTenant(
        directory=world.container.tenants(),
        queue=world.container.queue(),
        waiting=world.container.waiting_notes(),
        clock=clock,
        deployment_epoch=None,
        batch=2,
    )

    assert (await resume("acme")).requeued == 5
    assert await world.drain() == ["completed"] * 5


async def test_a_worker_finishes_a_resume_that_stopped_half_way(
    world: World, clock: FakeClock
) -> None:
    await world.container.suspend_tenant()("acme")
    await world.start("acme", "x-1")
    await world.drain()
    directory = world.container.tenants()
    record = await directory.get("acme")
    # The resume wrote "active" and stopped before it re-enqueued anything.
    await directory.write(
        resumed(record, "acme", epoch=None, now_ms=clock.now_ms()), expected_version=1
    )

    await world.start("acme", "x-2")
    assert await world.drain() == ["completed"]
    assert await directory.parked_count("acme") == 1, "left to the resume at first"

    clock.advance(STRANDED_GRACE_MS)
    await world.start("acme", "x-3")
    assert await world.drain() == ["completed", "completed"]
    assert await directory.parked_count("acme") == 0
    assert await world.status("acme", "x-1") is S.COMPLETED


async def test_a_resume_between_the_read_and_the_park_is_never_missed(
    world: World, clock: FakeClock
) -> None:
    """The park is kept only on the version decided on: a resume landing in between makes
    the gate decide again, and the carrier runs."""

    class ResumedMeanwhile(MemoryTenantDirectory):
        async def park(self, envelope: TaskEnvelope, *, expected_version: int) -> bool:
            record = await self.get(envelope.tenant_id)
            if record is not None and record.status is TenantStatus.SUSPENDED:
                await self.write(
                    resumed(record, "acme", epoch=None, now_ms=1),
                    expected_version=record.version,
                )
            return await super().park(envelope, expected_version=expected_version)

    racing = ResumedMeanwhile()
    await racing.write(suspended(None, "acme", epoch=None, now_ms=1), expected_version=0)
    world.container.tenants.override(providers.Object(racing))
    world.container.process_task.reset()
    await world.start("acme", "x-1")

    assert await world.drain() == ["completed"]
    assert await racing.parked_count("acme") == 0


async def test_a_park_that_keeps_losing_its_race_leaves_the_carrier_pending(
    world: World,
) -> None:
    class AlwaysMoving(MemoryTenantDirectory):
        async def park(self, envelope: TaskEnvelope, *, expected_version: int) -> bool:
            self.tries = getattr(self, "tries", 0) + 1
            return False

    moving = AlwaysMoving()
    await moving.write(suspended(None, "acme", epoch=None, now_ms=1), expected_version=0)
    world.container.tenants.override(providers.Object(moving))
    world.container.process_task.reset()
    await world.start("acme", "x-1")
    [delivery] = await world.container.queue().read("worker", count=10, block_ms=1)
    assert delivery.envelope is not None

    result = await world.container.process_task()(delivery.envelope)

    assert (result.disposition, result.outcome) == (
        Disposition.LEAVE_PENDING,
        "tenant_status_contended",
    )
    assert moving.tries == PARK_ATTEMPTS
    assert world.runs == []


# --- the deployment epoch --------------------------------------------------------------------


async def test_under_an_epoch_a_tenant_without_a_status_is_held_with_a_warning(
    epoch_world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await epoch_world.start("acme", "x-1")
    [delivery] = await epoch_world.container.queue().read("worker", count=10, block_ms=1)
    assert delivery.envelope is not None

    with caplog.at_level(logging.WARNING, logger="plaita.worker.step"):
        result = await epoch_world.container.process_task()(delivery.envelope)

    assert (result.disposition, result.outcome) == (
        Disposition.LEAVE_PENDING,
        "tenant_status_stale",
    )
    assert result.waited is WaitReason.TENANT_STATUS_STALE
    assert epoch_world.runs == []
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "event=tenant.status_stale" in warning.getMessage()
    assert "plaita tenants resume acme" in warning.getMessage()


async def test_the_held_warning_is_repeated_at_most_once_a_minute(
    epoch_world: World, caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    await epoch_world.start("acme", "x-1")
    [delivery] = await epoch_world.container.queue().read("worker", count=10, block_ms=1)
    assert delivery.envelope is not None
    step = epoch_world.container.process_task()

    with caplog.at_level(logging.WARNING, logger="plaita.worker.step"):
        for _ in range(3):
            await step(delivery.envelope)
        clock.advance(60_000)
        await step(delivery.envelope)

    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


async def test_under_an_epoch_resume_writes_the_status_and_the_tenant_runs(
    epoch_world: World,
) -> None:
    await epoch_world.start("acme", "x-1")
    assert await epoch_world.drain() == ["tenant_status_stale"]

    written = await epoch_world.container.resume_tenant()("acme")
    assert (written.outcome, written.record.epoch) == ("resumed", 3)

    # The held carrier is still pending: a worker's reclaim redelivers it.
    [pending] = await epoch_world.container.queue().reclaim("worker-2", min_idle_ms=0, count=10)
    assert pending.envelope is not None
    result = await epoch_world.container.process_task()(pending.envelope)
    assert result.outcome == "completed"


async def test_under_an_epoch_a_status_of_an_older_deployment_is_held(
    epoch_world: World, clock: FakeClock
) -> None:
    await epoch_world.container.tenants().write(
        resumed(None, "acme", epoch=2, now_ms=clock.now_ms()), expected_version=0
    )
    await epoch_world.start("acme", "x-1")

    assert await epoch_world.drain() == ["tenant_status_stale"]


async def test_a_status_of_a_newer_deployment_holds_even_the_default_tenant(
    epoch_world: World, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    await epoch_world.container.tenants().write(
        resumed(None, "default", epoch=4, now_ms=clock.now_ms()), expected_version=0
    )
    await epoch_world.start("default", "x-1")

    with caplog.at_level(logging.WARNING, logger="plaita.worker.step"):
        assert await epoch_world.drain() == ["tenant_status_stale"]

    assert "restart this worker with the deployment's PLAITA_DEPLOYMENT_EPOCH" in caplog.text


async def test_under_an_epoch_the_default_tenant_fails_open(epoch_world: World) -> None:
    await epoch_world.start("default", "x-1")

    assert await epoch_world.drain() == ["completed"]


async def test_every_write_stamps_the_writers_epoch(epoch_world: World) -> None:
    await epoch_world.container.suspend_tenant()("acme")
    quota = await epoch_world.container.set_tenant_quota()("acme", 4)

    record = await epoch_world.container.tenants().get("acme")
    assert record == quota.record
    assert (record.status, record.max_running, record.epoch, record.version) == (
        TenantStatus.SUSPENDED,
        4,
        3,
        2,
    )


async def test_a_status_of_an_older_epoch_is_rewritten_by_suspend(
    epoch_world: World, clock: FakeClock
) -> None:
    directory = epoch_world.container.tenants()
    await directory.write(
        suspended(None, "acme", epoch=2, now_ms=clock.now_ms()), expected_version=0
    )

    again = await epoch_world.container.suspend_tenant()("acme")

    assert (again.outcome, again.record.epoch) == ("suspended", 3)


# --- quota and listing -----------------------------------------------------------------------


async def test_a_quota_is_set_cleared_and_listed(world: World) -> None:
    set_now = await world.container.set_tenant_quota()("acme", 5)
    assert (set_now.outcome, set_now.record.max_running) == ("quota_set", 5)
    assert (await world.container.set_tenant_quota()("acme", 5)).outcome == "quota_unchanged"
    cleared = await world.container.set_tenant_quota()("acme", None)
    assert (cleared.outcome, cleared.record.max_running) == ("quota_set", None)
    await world.container.suspend_tenant()("zeta")

    listed = await world.container.list_tenants()()

    assert [(v.tenant_id, v.to_json()["status"]) for v in listed] == [
        ("acme", "active"),
        ("zeta", "suspended"),
    ]


async def test_the_gate_answers_with_the_tenants_quota(world: World, clock: FakeClock) -> None:
    """What the slot tables are given: the record's ``max_running``."""
    await world.container.set_tenant_quota()("acme", 7)
    await world.start("acme", "x-1")
    [delivery] = await world.container.queue().read("worker", count=10, block_ms=1)
    assert delivery.envelope is not None
    gate = TenantGate(
        directory=world.container.tenants(),
        queue=world.container.queue(),
        waiting=world.container.waiting_notes(),
        clock=clock,
        deployment_epoch=None,
    )
    carrier = Carrier(delivery.envelope)

    admitted = await gate.admit(carrier, gate.read_ahead(carrier))

    assert (admitted.stopped, admitted.max_running) == (None, 7)


@pytest.mark.parametrize("quota", [0, -3, 1_000_001])
async def test_a_bad_quota_is_refused_by_name(world: World, quota: int) -> None:
    with pytest.raises(InvalidTenantQuotaError):
        await world.container.set_tenant_quota()("acme", quota)
    assert await world.container.tenants().get("acme") is None


async def test_show_of_a_tenant_without_a_record_says_so(world: World) -> None:
    view = await world.container.show_tenant()("nobody")
    assert view.record is None
    assert view.to_json()["recorded"] is False and view.gate.runs


async def test_a_write_that_keeps_losing_its_compare_and_set_is_refused_by_name(
    world: World,
) -> None:
    class Contended(MemoryTenantDirectory):
        async def write(self, record: TenantRecord, *, expected_version: int) -> bool:
            self.tries = getattr(self, "tries", 0) + 1
            return False

    contended = Contended()
    world.container.tenants.override(providers.Object(contended))

    with pytest.raises(TenantWriteConflictError, match="run the command again"):
        await world.container.suspend_tenant()("acme")
    assert contended.tries == WRITE_ATTEMPTS


async def test_a_carrier_the_earlier_gates_refuse_is_never_parked(world: World) -> None:
    """The tenant's record is read ahead of the ``before_lease`` gates; a carrier they refuse
    (here: its execution was deleted) goes no further, and its read is dropped."""
    await world.container.suspend_tenant()("acme")
    await world.start("acme", "x-1")
    with tenant_scope("acme"):
        await world.container.delete_execution()("x-1", reason="test")

    assert await world.drain() == ["execution_deleted"]
    assert await world.container.tenants().parked_count("acme") == 0


async def test_the_reaper_leaves_a_suspended_tenants_executions_to_the_resume(
    world: World, clock: FakeClock
) -> None:
    """Their carriers are parked, not lost: a reaper's continue would only be parked too."""
    await world.container.suspend_tenant()("acme")
    await world.start("acme", "x-1")
    assert await world.drain() == ["tenant_suspended"]
    clock.advance(3_600_000)

    with tenant_scope("acme"):
        report = await world.container.reap_zombies()()

    [item] = report.items
    assert item.action is ReapAction.SKIP_TENANT_WAITS
    assert "plaita tenants resume acme" in item.detail
    assert await world.drain() == []

    await world.container.resume_tenant()("acme")
    with tenant_scope("acme"):
        assert [i.action for i in (await world.container.reap_zombies()()).items] == [
            ReapAction.REQUEUE
        ]
