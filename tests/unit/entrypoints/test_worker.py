"""The worker loop on the memory twin: ack after dispatch, dead letters, drain, serialisation."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.adapters.system import SystemClock
from plaita.application.null_objects import NoMetrics
from plaita.application.ports import Delivery
from plaita.application.use_cases.dead_letter_guard import GuardDeadLetter
from plaita.application.use_cases.step import RECLAIM_SKIPPED, DispatchResult, Disposition
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.entrypoints.worker import KeyedLocks, Worker

from ..application.conftest import FakeClock


def start(execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.start(
        execution_id=execution_id,
        flow_id="f",
        version="1",
        params={},
        now_ms=1,
        generations=LEGACY_GENERATIONS,
    )


def resume(execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=execution_id,
        flow_id="f",
        resume_type=ResumeType.CONTINUE,
        now_ms=1,
        generations=LEGACY_GENERATIONS,
    )


@attrs.define
class ScriptedStep:
    """Stands in for ProcessTask: answers each carrier with a disposition, records overlap."""

    answers: dict[str, Disposition] = attrs.field(factory=dict)
    #: Executions whose next carrier the step gives up on, once (a dead letter that is no
    #: refusal, W2).
    given_up: set[str] = attrs.field(factory=set)
    #: Executions whose carriers the step's gates leave pending beside a live lease (W2).
    skipped: set[str] = attrs.field(factory=set)
    seen: list[str] = attrs.field(factory=list)
    running: set[str] = attrs.field(factory=set)
    overlapped: bool = False

    async def __call__(
        self,
        envelope: TaskEnvelope,
        *,
        message_id: str | None = None,
        reclaimed: bool = False,
        deliveries: int = 1,
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
        if key in self.skipped:
            return DispatchResult(Disposition.LEAVE_PENDING, RECLAIM_SKIPPED, "live_lease")
        if key in self.given_up:
            self.given_up.discard(key)
            return DispatchResult(Disposition.DEAD_LETTER, "attempts_exhausted", refused=False)
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
    options.setdefault("read_block_ms", 10)
    return Worker(queue=queue, process=step, consumer="w1", **options)  # type: ignore[arg-type]


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

    async def trim_acknowledged(self) -> int:
        return await self.inner.trim_acknowledged()

    async def dead_letters_dropped(self) -> int:
        return await self.inner.dead_letters_dropped()


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


# --- drain (W17) ---------------------------------------------------------------------------


@attrs.define
class GatedStep:
    """A step that runs until the test opens its gate; ``gate=None`` never returns."""

    gate: asyncio.Event | None = attrs.field(factory=asyncio.Event)
    started: asyncio.Event = attrs.field(factory=asyncio.Event)
    cancelled: bool = False

    async def __call__(
        self,
        envelope: TaskEnvelope,
        *,
        message_id: str | None = None,
        reclaimed: bool = False,
        deliveries: int = 1,
    ) -> DispatchResult:
        self.started.set()
        try:
            await (self.gate or asyncio.Event()).wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return DispatchResult(Disposition.ACK, "completed")


async def test_a_dispatch_running_when_the_drain_begins_completes_and_is_acked(
    queue: MemoryTaskQueue,
) -> None:
    """I3: only completed dispatches are acked — and a completed one is, even after the stop."""
    await queue.enqueue(start())
    step = GatedStep()
    worker = worker_for(queue, step)  # type: ignore[arg-type]
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(step.started.wait(), 5)
    stop.set()
    await asyncio.sleep(0.05)
    assert not running.done(), "the drain waits for the running dispatch"
    assert (await queue.stats()).pending == 1, "not acked before it completed"
    assert step.gate is not None
    step.gate.set()
    await asyncio.wait_for(running, 5)
    assert (await queue.stats()).pending == 0
    assert worker.drain_state.may_exit and worker.drain_state.in_flight == 0


async def test_after_the_drain_timeout_the_worker_exits_without_acking_what_still_runs(
    queue: MemoryTaskQueue,
) -> None:
    """I2: the timeout is advisory; the unfinished carrier stays pending for another worker."""
    await queue.enqueue(start())
    step = GatedStep(gate=None)
    worker = worker_for(queue, step, drain_timeout_seconds=0.05)  # type: ignore[arg-type]
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(step.started.wait(), 5)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert (await queue.stats()).pending == 1
    assert step.cancelled, "the process exits: nothing of the step is left running"
    assert worker.drain_state.may_exit


async def test_a_stop_is_noticed_within_about_one_read_block(queue: MemoryTaskQueue) -> None:
    worker = worker_for(queue, ScriptedStep(), read_block_ms=50)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await asyncio.sleep(0.02)
    stopped_at = asyncio.get_running_loop().time()
    stop.set()
    await asyncio.wait_for(running, 5)
    assert asyncio.get_running_loop().time() - stopped_at < 0.5


async def test_a_full_worker_notices_the_stop_without_waiting_for_a_free_slot(
    queue: MemoryTaskQueue,
) -> None:
    await queue.enqueue(start())
    step = GatedStep(gate=None)
    worker = worker_for(queue, step, concurrency=1, drain_timeout_seconds=0.01)  # type: ignore[arg-type]
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(step.started.wait(), 5)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert (await queue.stats()).pending == 1


# --- reclaim and the dead-letter guard (W2, W9) --------------------------------------------


@attrs.define
class Pool:
    """The memory twin a reclaiming worker needs, on a clock the test moves."""

    clock: FakeClock
    queue: MemoryTaskQueue
    leases: MemoryLeaseManager
    executions: MemoryExecutionRepository

    def guard(self) -> GuardDeadLetter:
        return GuardDeadLetter(
            executions=self.executions,
            leases=self.leases,
            queue=self.queue,
            clock=self.clock,
            holder_id="w1",
            counters=MemoryCounterStore(self.clock),
        )

    async def left_by_a_dead_worker(self, envelope: TaskEnvelope) -> str:
        """``envelope`` delivered once to a worker that died; now idle long enough to reclaim."""
        message_id = await self.queue.enqueue(envelope)
        await self.queue.read("dead-worker", count=1, block_ms=0)
        self.clock.advance(120)
        return message_id

    async def store(self, state: ExecutionState) -> None:
        lease = await self.leases.acquire(state.execution_id, "writer", ttl_ms=1000)
        assert lease is not None
        await self.executions.save(state, fence=lease.generation)
        await self.leases.release(lease)


@pytest.fixture
def pool() -> Pool:
    clock = FakeClock()
    leases = MemoryLeaseManager(clock)
    return Pool(clock, MemoryTaskQueue(clock), leases, MemoryExecutionRepository(leases))


def reclaiming_worker(pool: Pool, step: ScriptedStep) -> Worker:
    return Worker(
        queue=pool.queue,
        process=step,  # type: ignore[arg-type]
        consumer="w1",
        read_block_ms=10,
        claim_min_idle_ms=60_000,
        guard=pool.guard(),
    )


def suspended(execution_id: str = "x-1") -> ExecutionState:
    return ExecutionState.new(
        execution_id=execution_id,
        flow_id="f",
        flow_version="1",
        fingerprint="fp",
        start_node_id="wait",
        input={},
        now_ms=1,
    ).transition(ExecutionStatus.SUSPENDED, now_ms=2)


async def test_a_given_up_carrier_of_a_live_execution_without_lease_gets_a_recovery_copy_then_is_dead_lettered(  # noqa: E501
    pool: Pool,
) -> None:
    """W9: a carrier the step gives up on (not a refusal) goes through the guard, which makes
    a recovery copy first when the execution still runs and nobody holds its lease."""
    await pool.store(suspended())
    original = await pool.left_by_a_dead_worker(resume())
    step = ScriptedStep(given_up={"x-1"})

    async def copy_ran() -> bool:
        return len(step.seen) == 2

    await run_until(reclaiming_worker(pool, step), copy_ran)
    [letter] = await pool.queue.dead_letters()
    assert letter.message_id == original and letter.reason.startswith("holder_gone")
    assert step.seen == ["x-1:continue", "x-1:continue"], "the original, then its copy"


async def test_a_reclaimed_carrier_is_dispatched_whatever_redis_counted_for_it(pool: Pool) -> None:
    """W2: --max-deliveries counts attempts that crashed (the step records them with the
    execution), never Redis's delivery counter: skipped redeliveries cost nothing."""
    message_id = await pool.left_by_a_dead_worker(resume())
    for _ in range(9):  # nine skipped reclaims: the delivery counter is 10
        await pool.queue.reclaim("skipper", min_idle_ms=0, count=1)
    pool.clock.advance(120)
    step = ScriptedStep()

    async def seen() -> bool:
        return bool(step.seen)

    await run_until(reclaiming_worker(pool, step), seen)
    assert step.seen == ["x-1:continue"] and await pool.queue.dead_letters() == []
    assert message_id


class CountingMetrics(NoMetrics):
    def __init__(self) -> None:
        self.reclaims_skipped = 0
        self.outcomes: list[str] = []

    def reclaim_skipped(self) -> None:
        self.reclaims_skipped += 1

    def dispatched(self, outcome: str, disposition: str) -> None:
        self.outcomes.append(outcome)


async def test_a_carrier_the_step_skipped_beside_a_live_lease_stays_pending_and_is_counted(
    pool: Pool,
) -> None:
    """W2: the step's gates leave a reclaimed carrier pending while a holder works; the worker
    neither acks nor dead-letters it, and counts the skip."""
    await pool.left_by_a_dead_worker(resume())
    step = ScriptedStep(skipped={"x-1"})
    metrics = CountingMetrics()
    worker = Worker(
        queue=pool.queue,
        process=step,  # type: ignore[arg-type]
        consumer="w1",
        read_block_ms=10,
        claim_min_idle_ms=60_000,
        guard=pool.guard(),
        metrics=metrics,
    )

    async def seen() -> bool:
        return bool(step.seen)

    await run_until(worker, seen)
    assert metrics.reclaims_skipped >= 1 and metrics.outcomes == []
    assert await pool.queue.dead_letters() == [], "not dead-lettered"
    assert (await pool.queue.stats()).pending == 1, "not acked"


async def test_a_dead_letter_disposition_goes_through_the_guard_without_a_copy(
    pool: Pool,
) -> None:
    """The step refused the carrier itself (too old, wrong flow): a copy would be refused too."""
    await pool.store(suspended())
    await pool.queue.enqueue(resume())
    step = ScriptedStep(answers={"x-1": Disposition.DEAD_LETTER})

    async def dead_lettered() -> bool:
        return bool(await pool.queue.dead_letters())

    await run_until(reclaiming_worker(pool, step), dead_lettered)
    [letter] = await pool.queue.dead_letters()
    assert letter.reason.startswith("schema_rejected: dead_letter")
    assert step.seen == ["x-1:continue"], "no recovery copy was enqueued and run"
    assert (await pool.queue.stats()).pending == 0


class BrokenReads(MemoryTaskQueue):
    """A queue whose reads fail, like a dropped Redis connection, until ``healed``."""

    def __init__(self) -> None:
        super().__init__(SystemClock())
        self.failures = 0
        self.healed = False

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        if not self.healed:
            self.failures += 1
            raise ConnectionError("Connection closed by server")
        return await super().read(consumer, count=count, block_ms=block_ms)


async def test_failed_reads_are_retried_with_an_interruptible_backoff() -> None:
    """R3: a dropped connection does not end the worker; I5: its back-off yields to a stop."""
    queue = BrokenReads()
    await queue.enqueue(start())
    step = ScriptedStep()
    worker = worker_for(queue, step)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    async with asyncio.timeout(5):
        while queue.failures < 2:
            await asyncio.sleep(0.005)
    queue.healed = True
    async with asyncio.timeout(5):
        while not step.seen:
            await asyncio.sleep(0.005)
    queue.healed = False
    await asyncio.sleep(0.02)
    stopped_at = asyncio.get_running_loop().time()
    stop.set()
    await asyncio.wait_for(running, 5)
    assert asyncio.get_running_loop().time() - stopped_at < 0.5
    assert (await queue.stats()).pending == 0
