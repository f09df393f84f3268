"""The worker loop on the memory twin: ack after dispatch, dead letters, drain, serialisation."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.system import SystemClock
from plaita.application.ports import Delivery
from plaita.application.use_cases.process_task import DispatchResult, Disposition
from plaita.domain.envelope import ResumeType, TaskEnvelope
from plaita.entrypoints.worker import KeyedLocks, Worker


def start(execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id, flow_id="f", version="1", params={}, now_ms=1
    )


def resume(execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=execution_id, flow_id="f", resume_type=ResumeType.CONTINUE, now_ms=1
    )


@attrs.define
class ScriptedStep:
    """Stands in for ProcessTask: answers each carrier with a disposition, records overlap."""

    answers: dict[str, Disposition] = attrs.field(factory=dict)
    seen: list[str] = attrs.field(factory=list)
    running: set[str] = attrs.field(factory=set)
    overlapped: bool = False

    async def __call__(
        self, envelope: TaskEnvelope, *, message_id: str | None = None, reclaimed: bool = False
    ) -> DispatchResult:
        key = envelope.execution_id
        if key in self.running:
            self.overlapped = True
        self.running.add(key)
        await asyncio.sleep(0.01)
        self.running.discard(key)
        self.seen.append(f"{key}:{envelope.resume_type or envelope.kind}")
        if key == "boom":
            raise RuntimeError("handler bug escaped the step")
        disposition = self.answers.get(key, Disposition.ACK)
        return DispatchResult(disposition, disposition.value, "scripted")


async def run_until(worker: Worker, condition: Any, timeout: float = 5.0) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(timeout):
            while not await condition():
                await asyncio.sleep(0.005)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout)


@pytest.fixture
async def queue() -> MemoryTaskQueue:
    q = MemoryTaskQueue(SystemClock())
    await q.ensure_group()
    return q


def worker_for(queue: MemoryTaskQueue, step: ScriptedStep, **options: Any) -> Worker:
    return Worker(queue=queue, process=step, consumer="w1", read_block_ms=10, **options)  # type: ignore[arg-type]


async def test_acked_only_after_the_dispatch_returned(queue: MemoryTaskQueue) -> None:
    step = ScriptedStep(answers={"x-2": Disposition.LEAVE_PENDING})
    await queue.enqueue(start("x-1"))
    await queue.enqueue(start("x-2"))

    async def both_seen() -> bool:
        return len(step.seen) == 2

    await run_until(worker_for(queue, step), both_seen)
    stats = await queue.stats()
    assert stats.pending == 1, "the carrier left pending is not acked"


async def test_an_undecodable_carrier_is_dead_lettered_with_its_raw_fields(
    queue: MemoryTaskQueue,
) -> None:
    await queue.enqueue_raw({"envelope": "{not json", "schema_version": "1"})
    await queue.enqueue(start())
    step = ScriptedStep()

    async def done() -> bool:
        return bool(step.seen) and bool(await queue.dead_letters())

    await run_until(worker_for(queue, step), done)
    [letter] = await queue.dead_letters()
    assert letter.raw["envelope"] == "{not json" and "malformed" in letter.reason
    assert (await queue.stats()).pending == 0


async def test_a_step_that_raises_leaves_its_carrier_pending_and_the_worker_runs_on(
    queue: MemoryTaskQueue,
) -> None:
    await queue.enqueue(start("boom"))
    await queue.enqueue(start("x-1"))
    step = ScriptedStep()

    async def both_seen() -> bool:
        return len(step.seen) == 2

    await run_until(worker_for(queue, step), both_seen)
    assert (await queue.stats()).pending == 1


async def test_carriers_of_one_execution_never_run_at_once_in_a_process(
    queue: MemoryTaskQueue,
) -> None:
    for envelope in (start(), resume(), resume(), start("x-2")):
        await queue.enqueue(envelope)
    step = ScriptedStep()

    async def all_seen() -> bool:
        return len(step.seen) == 4

    await run_until(worker_for(queue, step, concurrency=8), all_seen)
    assert not step.overlapped
    assert step.seen.index("x-1:start") < step.seen.index("x-1:continue")


class StopOnRead:
    """A queue whose read returns a carrier just after the drain began (W17)."""

    def __init__(self, inner: MemoryTaskQueue, stop: asyncio.Event) -> None:
        self.inner = inner
        self.stop = stop
        self.acked: list[str] = []

    async def ensure_group(self) -> None:
        await self.inner.ensure_group()

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        return []

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        deliveries = await self.inner.read(consumer, count=count, block_ms=block_ms)
        self.stop.set()
        return deliveries

    async def ack(self, message_id: str) -> None:
        self.acked.append(message_id)


async def test_carriers_read_after_the_drain_began_are_neither_dispatched_nor_acked(
    queue: MemoryTaskQueue,
) -> None:
    await queue.enqueue(start())
    stop = asyncio.Event()
    gated = StopOnRead(queue, stop)
    step = ScriptedStep()
    worker = Worker(queue=gated, process=step, consumer="w1", read_block_ms=10)  # type: ignore[arg-type]
    await asyncio.wait_for(worker.run(stop), 5)
    assert step.seen == [] and gated.acked == []
    assert (await queue.stats()).pending == 1


async def test_keyed_locks_forget_keys_nobody_holds() -> None:
    locks = KeyedLocks()
    async with locks.hold("a"):
        assert len(locks) == 1
    assert len(locks) == 0
