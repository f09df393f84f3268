"""The dead-letter guard performed on the memory twin: one test per GuardAction (W9, I0)."""

from __future__ import annotations

import attrs
import pytest

from plaita.adapters.memory.counters import MemoryCounterStore
from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.application.ports import Delivery
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.dead_letter_guard import (
    NODE_BUDGET_EXHAUSTED_KIND,
    GuardDeadLetter,
    carrier_execution_id,
    carrier_tenant_id,
)
from plaita.domain.budgets import Counter, CounterChange, CounterOp
from plaita.domain.dead_letter import GuardAction
from plaita.domain.envelope import LEGACY_GENERATIONS, ResumeType, TaskEnvelope
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.tombstone import Tombstone

from .conftest import FakeClock

TTL_MS = 60_000
OVER_THE_LIMIT = "attempts_exhausted: 5 attempts at node 'b' crashed their worker"


@attrs.define
class World:
    clock: FakeClock
    leases: MemoryLeaseManager
    executions: MemoryExecutionRepository
    queue: MemoryTaskQueue
    counters: MemoryCounterStore

    def guard(self, **changes: object) -> GuardDeadLetter:
        parts = {
            "executions": self.executions,
            "leases": self.leases,
            "queue": self.queue,
            "clock": self.clock,
            "holder_id": "guard-worker",
            "lease_ttl_ms": TTL_MS,
            "counters": self.counters,
            "max_deliveries": 5,
            **changes,
        }
        return GuardDeadLetter(**parts)  # type: ignore[arg-type]

    async def store(self, state: ExecutionState) -> None:
        lease = await self.leases.acquire(state.execution_id, "writer", ttl_ms=TTL_MS)
        assert lease is not None
        await self.executions.save(state, fence=lease.generation)
        await self.leases.release(lease)

    async def reclaimed(self, envelope: TaskEnvelope, deliveries: int = 6) -> Delivery:
        """``envelope`` on the stream, delivered ``deliveries`` times, the last by reclaim."""
        await self.queue.enqueue(envelope)
        [delivery] = await self.queue.read("dead-worker", count=1, block_ms=0)
        for _ in range(deliveries - 1):
            [delivery] = await self.queue.reclaim("w1", min_idle_ms=0, count=1)
        assert delivery.delivery_count == deliveries
        return delivery

    async def stream(self) -> list[Delivery]:
        """Every carrier not yet delivered (the recovery copies)."""
        return await self.queue.read("reader", count=100, block_ms=0)


@pytest.fixture
def world(clock: FakeClock) -> World:
    leases = MemoryLeaseManager(clock)
    return World(
        clock,
        leases,
        MemoryExecutionRepository(leases),
        MemoryTaskQueue(clock),
        MemoryCounterStore(clock),
    )


def carrier(clock: FakeClock, execution_id: str = "x-1") -> TaskEnvelope:
    return TaskEnvelope.resume(
        execution_id=execution_id,
        flow_id="f",
        resume_type=ResumeType.CONTINUE,
        now_ms=clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )


def state(clock: FakeClock, status: ExecutionStatus = ExecutionStatus.RUNNING) -> ExecutionState:
    running = ExecutionState.new(
        execution_id="x-1",
        flow_id="f",
        flow_version="1",
        fingerprint="fp",
        start_node_id="b",
        input={},
        now_ms=clock.now_ms(),
    )
    return running if status is ExecutionStatus.RUNNING else running.transition(status, now_ms=1)


async def test_a_terminal_execution_releases_its_carrier(world: World) -> None:
    await world.store(state(world.clock, ExecutionStatus.COMPLETED))
    delivery = await world.reclaimed(carrier(world.clock))

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.reason, outcome.released) == (
        GuardAction.RELEASE,
        "execution_terminal",
        True,
    )
    [letter] = await world.queue.dead_letters()
    assert letter.message_id == delivery.message_id
    assert letter.reason == f"execution_terminal: {OVER_THE_LIMIT}"
    assert (await world.queue.stats()).pending == 0
    assert await world.stream() == [], "no copy for a terminal execution"


async def test_a_missing_execution_releases_its_carrier(world: World) -> None:
    delivery = await world.reclaimed(carrier(world.clock))
    outcome = await world.guard()(delivery, OVER_THE_LIMIT)
    assert (outcome.action, outcome.reason) == (GuardAction.RELEASE, "execution_missing")
    assert len(await world.queue.dead_letters()) == 1
    assert await world.stream() == []


async def test_a_held_lease_keeps_the_carrier_pending(world: World) -> None:
    await world.store(state(world.clock))
    delivery = await world.reclaimed(carrier(world.clock))
    assert await world.leases.acquire("x-1", "live-holder", ttl_ms=TTL_MS) is not None

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.reason, outcome.released) == (
        GuardAction.KEEP_PENDING,
        "lease_held",
        False,
    )
    assert await world.queue.dead_letters() == []
    assert (await world.queue.stats()).pending == 1, "never trimmed, never acked"
    assert await world.stream() == []


class FailingLoads(MemoryExecutionRepository):
    async def load(self, execution_id: str) -> ExecutionState | None:
        raise ConnectionError("storage unreachable")


async def test_a_failed_lookup_keeps_the_carrier_pending(world: World) -> None:
    delivery = await world.reclaimed(carrier(world.clock))
    guard = world.guard(executions=FailingLoads(world.leases))

    outcome = await guard(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.reason) == (GuardAction.KEEP_PENDING, "lookup_failed")
    assert await world.queue.dead_letters() == []
    assert (await world.queue.stats()).pending == 1


async def test_a_spent_node_budget_is_terminalised_under_a_lease_then_released(
    world: World,
) -> None:
    await world.store(state(world.clock))
    spent = [CounterChange(Counter.NODE_CRASHES, CounterOp.INCREMENT, "b")] * 5
    await world.counters.apply("x-1", spent, ttl_ms=TTL_MS)
    delivery = await world.reclaimed(carrier(world.clock))

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.released) == (GuardAction.TERMINALISE_THEN_RELEASE, True)
    failed = await world.executions.load("x-1")
    assert failed is not None and failed.status is ExecutionStatus.ERROR
    assert failed.error is not None
    assert (failed.error.node_id, failed.error.kind) == ("b", NODE_BUDGET_EXHAUSTED_KIND)
    assert "5 attempts crashed their worker (--max-deliveries 5)" in failed.error.message
    # The guard reads the crash count; the worker step alone counts attempts (W2).
    assert (await world.counters.read("x-1")).node_crashes == {"b": 5}
    assert await world.leases.holder("x-1") is None, "the guard's lease is released"
    assert len(await world.queue.dead_letters()) == 1
    assert await world.stream() == [], "a recovery copy would spend the budget again"


async def test_a_failed_release_after_the_terminal_write_still_dead_letters_the_carrier(
    world: World,
) -> None:
    """W9, I0: the execution is in error, so its carrier may go; the guard's lease lapses by
    itself within its TTL."""
    await world.store(state(world.clock))
    spent = [CounterChange(Counter.NODE_CRASHES, CounterOp.INCREMENT, "b")] * 5
    await world.counters.apply("x-1", spent, ttl_ms=TTL_MS)
    delivery = await world.reclaimed(carrier(world.clock))

    async def release_fails(lease: object) -> bool:
        raise ConnectionError("Connection closed by server")

    world.leases.release = release_fails  # type: ignore[method-assign,assignment]

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.released) == (GuardAction.TERMINALISE_THEN_RELEASE, True)
    failed = await world.executions.load("x-1")
    assert failed is not None and failed.status is ExecutionStatus.ERROR
    assert len(await world.queue.dead_letters()) == 1
    world.clock.advance(TTL_MS / 1000)
    assert await world.leases.holder("x-1") is None


async def test_terminalising_keeps_the_carrier_pending_when_the_lease_is_taken_first(
    world: World,
) -> None:
    await world.store(state(world.clock))
    spent = [CounterChange(Counter.NODE_CRASHES, CounterOp.INCREMENT, "b")] * 5
    await world.counters.apply("x-1", spent, ttl_ms=TTL_MS)
    delivery = await world.reclaimed(carrier(world.clock))

    class RacedLeases(MemoryLeaseManager):
        async def acquire(self, execution_id: str, holder_id: str, *, ttl_ms: int) -> None:
            return None  # another worker took the lease between the lookup and the acquire

    outcome = await world.guard(leases=RacedLeases(world.clock))(delivery, OVER_THE_LIMIT)

    assert (outcome.reason, outcome.released) == ("lease_taken", False)
    assert await world.queue.dead_letters() == []
    running = await world.executions.load("x-1")
    assert running is not None and running.status is ExecutionStatus.RUNNING


async def test_a_non_terminal_execution_without_a_lease_gets_a_recovery_copy_then_the_carrier_is_dead_lettered(  # noqa: E501
    world: World,
) -> None:
    await world.store(state(world.clock, ExecutionStatus.SUSPENDED))
    source = carrier(world.clock)
    delivery = await world.reclaimed(source)
    world.clock.advance(3600)

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.reason, outcome.released) == (
        GuardAction.ENQUEUE_COPY_THEN_RELEASE,
        "holder_gone",
        True,
    )
    [copy] = await world.stream()
    assert copy.message_id == outcome.copy_id and copy.delivery_count == 1
    assert copy.envelope is not None
    # The copy is the same carrier, as old as its source and of its schema (W11, W14).
    assert copy.envelope == source
    [letter] = await world.queue.dead_letters()
    assert letter.message_id == delivery.message_id
    assert letter.reason.startswith("holder_gone: ")
    assert (await world.queue.stats()).pending == 1, "only the copy, just delivered to reader"


class RecordingQueue(MemoryTaskQueue):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.calls: list[str] = []
        self.fail_enqueue = False

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        self.calls.append("enqueue")
        if self.fail_enqueue:
            raise ConnectionError("stream unreachable")
        return await super().enqueue(envelope)

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        self.calls.append("dead_letter")
        return await super().dead_letter(delivery, reason)


async def test_the_recovery_copy_is_written_before_the_original_is_released(
    world: World,
) -> None:
    world.queue = RecordingQueue(world.clock)
    await world.store(state(world.clock))
    delivery = await world.reclaimed(carrier(world.clock))

    await world.guard()(delivery, OVER_THE_LIMIT)

    assert world.queue.calls[-2:] == ["enqueue", "dead_letter"]


async def test_a_failed_recovery_copy_keeps_the_original_pending(world: World) -> None:
    world.queue = RecordingQueue(world.clock)
    await world.store(state(world.clock))
    delivery = await world.reclaimed(carrier(world.clock))
    world.queue.fail_enqueue = True

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.reason, outcome.released) == ("perform_failed", False)
    assert "dead_letter" not in world.queue.calls
    assert (await world.queue.stats()).pending == 1


async def test_a_schema_rejected_carrier_is_released_once_without_a_copy(world: World) -> None:
    await world.store(state(world.clock))
    envelope = carrier(world.clock)
    await world.queue.enqueue_raw(
        {
            "envelope": f'{{"kind":"resume","execution_id":"{envelope.execution_id}"}}',
            "schema_version": "99",
        }
    )
    [delivery] = await world.queue.read("w1", count=1, block_ms=0)
    assert delivery.envelope is None and carrier_execution_id(delivery) == "x-1"

    outcome = await world.guard()(delivery, delivery.problem or "", schema_rejected=True)

    assert (outcome.action, outcome.reason, outcome.released) == (
        GuardAction.RELEASE_ONCE_NO_COPY,
        "schema_rejected",
        True,
    )
    [letter] = await world.queue.dead_letters()
    assert letter.raw["schema_version"] == "99" and "schema_version 99" in letter.reason
    assert await world.stream() == [], "a copy of the same version would be rejected again"
    running = await world.executions.load("x-1")
    assert running is not None and running.status is ExecutionStatus.RUNNING


async def test_a_schema_rejected_carrier_of_a_live_holder_stays_pending(world: World) -> None:
    await world.store(state(world.clock))
    delivery = await world.reclaimed(carrier(world.clock), deliveries=1)
    assert await world.leases.acquire("x-1", "live-holder", ttl_ms=TTL_MS) is not None

    outcome = await world.guard()(delivery, "too new", schema_rejected=True)

    assert (outcome.action, outcome.released) == (GuardAction.KEEP_PENDING, False)


async def test_an_undecodable_carrier_naming_no_execution_is_released(world: World) -> None:
    await world.queue.enqueue_raw({"envelope": "{not json"})
    [delivery] = await world.queue.read("w1", count=1, block_ms=0)

    outcome = await world.guard()(delivery, "malformed", schema_rejected=True)

    assert (outcome.action, outcome.released) == (GuardAction.RELEASE_ONCE_NO_COPY, True)
    assert (await world.queue.stats()).pending == 0


class DeletedButStillLoaded(MemoryExecutionRepository):
    """A delete racing the guard: the tombstone is there, the last load still saw the row."""

    async def tombstone(self, execution_id: str) -> Tombstone | None:
        return Tombstone("default", 1, "deleted by an operator")


async def test_a_deleted_execution_gets_no_recovery_copy(world: World) -> None:
    world.executions = DeletedButStillLoaded(world.leases)
    await world.store(state(world.clock))
    delivery = await world.reclaimed(carrier(world.clock))

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.reason, outcome.released) == (
        GuardAction.ENQUEUE_COPY_THEN_RELEASE,
        "execution_deleted",
        True,
    )
    assert outcome.copy_id is None and await world.stream() == []


async def test_a_start_that_never_reached_a_checkpoint_becomes_a_visible_error(
    world: World,
) -> None:
    """W9/I0: no state yet (its first node killed every worker) — the execution is recorded
    as failed, retryable, instead of vanishing into the DLQ."""
    start = TaskEnvelope.start(
        execution_id="x-1",
        flow_id="f",
        version="1",
        params={"n": 1},
        now_ms=world.clock.now_ms(),
        generations=LEGACY_GENERATIONS,
    )
    delivery = await world.reclaimed(start)

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert (outcome.action, outcome.released) == (GuardAction.TERMINALISE_THEN_RELEASE, True)
    failed = await world.executions.load("x-1")
    assert failed is not None and failed.status is ExecutionStatus.ERROR
    assert failed.input == {"n": 1} and failed.error is not None
    assert "never reached the first checkpoint" in failed.error.message
    assert len(await world.queue.dead_letters()) == 1


async def test_a_node_retry_count_never_spends_the_crash_budget(world: World) -> None:
    """W2, E15: retries of a handler's own failures are the node's retryTimes; only crashed
    attempts spend --max-deliveries, so a node with many retries is not given up for them."""
    await world.store(state(world.clock))
    retries = [CounterChange(Counter.NODE_RETRIES, CounterOp.INCREMENT, "b")] * 9
    await world.counters.apply("x-1", retries, ttl_ms=TTL_MS)
    delivery = await world.reclaimed(carrier(world.clock))

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    assert outcome.action is GuardAction.ENQUEUE_COPY_THEN_RELEASE


async def test_the_guard_never_counts_an_attempt_itself(world: World) -> None:
    """W2, one DLQ entry per dead carrier: counting lives in the worker step, so a copy and
    its original never spend the budget twice."""
    await world.store(state(world.clock))
    for _ in range(3):
        delivery = await world.reclaimed(carrier(world.clock))
        await world.guard()(delivery, OVER_THE_LIMIT)

    assert await world.counters.read("x-1") == (await world.counters.read("nobody"))


async def test_the_guard_acts_in_the_carriers_tenant(world: World) -> None:
    """W24: the acme carrier's execution is acme's; the default tenant's x-1 is left alone."""
    await world.store(state(world.clock, ExecutionStatus.COMPLETED))  # the default tenant's
    with tenant_scope("acme"):  # acme's x-1 is still running
        await world.store(attrs.evolve(state(world.clock), tenant_id="acme"))
    acme_carrier = attrs.evolve(carrier(world.clock), tenant_id="acme")
    delivery = await world.reclaimed(acme_carrier)

    outcome = await world.guard()(delivery, OVER_THE_LIMIT)

    # Running and unleased in acme: a recovery copy, where the default tenant's terminal x-1
    # would have meant a plain release.
    assert outcome.action is GuardAction.ENQUEUE_COPY_THEN_RELEASE
    [copy] = await world.stream()
    assert copy.envelope is not None and copy.envelope.tenant_id == "acme"


async def test_a_carrier_naming_an_invalid_tenant_touches_no_execution(world: World) -> None:
    """W24 fails closed: the raw carrier goes to the DLQ; no tenant's data is read."""
    await world.store(state(world.clock))
    raw = '{"kind":"resume","execution_id":"x-1","tenant_id":"a:b"}'
    await world.queue.enqueue_raw({"envelope": raw})
    [delivery] = await world.queue.read("w1", count=1, block_ms=0)

    outcome = await world.guard()(delivery, "malformed", schema_rejected=True)

    assert (outcome.action, outcome.released) == (GuardAction.RELEASE_ONCE_NO_COPY, True)
    [letter] = await world.queue.dead_letters(count=10)
    assert letter.raw["envelope"] == raw
    assert carrier_tenant_id(delivery) is None


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"envelope": "[" * 10_000 + "]" * 10_000}, id="ten-thousand-deep"),
        pytest.param({"envelope": b"\xff\xfe"}, id="not-utf8"),
        pytest.param({"envelope": '{"kind":"start","execution_id":"../../etc"}'}, id="bad-id"),
    ],
)
async def test_a_hostile_carrier_is_dead_lettered_once_never_crashing_the_guard(
    world: World, fields: dict[str, str | bytes]
) -> None:
    """W9, R4: the guard used to re-parse a 10,000-deep carrier and raise RecursionError,
    so it crash-looped and never reached the DLQ. It names no execution: released once."""
    await world.queue.enqueue_raw(fields)
    [delivery] = await world.queue.read("w1", count=1, block_ms=0)
    assert carrier_execution_id(delivery) is None

    outcome = await world.guard()(delivery, delivery.problem or "", schema_rejected=True)

    assert (outcome.action, outcome.released) == (GuardAction.RELEASE_ONCE_NO_COPY, True)
    [letter] = await world.queue.dead_letters(count=10)
    assert (letter.message_id, letter.raw) == (delivery.message_id, delivery.raw)
    assert (await world.queue.stats()).pending == 0
