"""Writing to one execution under a borrowed lease, on the memory twin (W3, W4).

acquire as this holder → reload → the caller's transition → fenced save → release, with a
named outcome when the lease is taken or the state is not the one the caller expected.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import pytest

from plaita.adapters.memory.lease import MemoryLeaseManager
from plaita.adapters.memory.storage import MemoryExecutionRepository
from plaita.application.use_cases.borrowed_lease import BorrowedLease, BorrowOutcome
from plaita.domain.errors import ExecutionLeaseError, OperatorActionRefusedError
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.lease import Lease

from .conftest import FakeClock

TTL_MS = 60_000
HOLDER = "operator:test"


class RecordingLeases(MemoryLeaseManager):
    """The memory lease manager, recording every release and failing them on demand."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.released: list[Lease] = []
        self.release_error: Exception | None = None

    async def release(self, lease: Lease) -> bool:
        self.released.append(lease)
        if self.release_error is not None:
            raise self.release_error
        return await super().release(lease)


@attrs.define
class World:
    clock: FakeClock
    leases: RecordingLeases
    executions: MemoryExecutionRepository

    def borrow(self) -> BorrowedLease:
        return BorrowedLease(
            executions=self.executions, leases=self.leases, holder_id=HOLDER, lease_ttl_ms=TTL_MS
        )

    async def store(self, state: ExecutionState) -> None:
        lease = await self.leases.acquire(state.execution_id, "writer", ttl_ms=TTL_MS)
        assert lease is not None
        await self.executions.save(state, fence=lease.generation)
        await self.leases.release(lease)
        self.leases.released.clear()


@pytest.fixture
def world(clock: FakeClock) -> World:
    leases = RecordingLeases(clock)
    return World(clock, leases, MemoryExecutionRepository(leases))


def running(clock: FakeClock) -> ExecutionState:
    return ExecutionState.new(
        execution_id="x-1",
        flow_id="f",
        flow_version="1",
        fingerprint="fp",
        start_node_id="a",
        input={},
        now_ms=clock.now_ms(),
    )


def failing(
    seen: list[ExecutionState | None],
) -> Callable[[ExecutionState | None], Awaitable[ExecutionState | None]]:
    """A transition to ERROR that records the state it was given."""

    async def transition(current: ExecutionState | None) -> ExecutionState | None:
        seen.append(current)
        assert current is not None
        return current.transition(ExecutionStatus.ERROR, now_ms=current.updated_at_ms + 1)

    return transition


async def test_a_free_lease_is_borrowed_the_state_reloaded_transitioned_saved_and_released(
    world: World,
) -> None:
    """W4: the transition sees the state stored under the lease, the save carries its fence."""
    stale = running(world.clock)
    await world.store(stale)
    moved = stale.transition(ExecutionStatus.SUSPENDED, now_ms=stale.updated_at_ms + 5)
    await world.store(moved)  # a worker moved it after the caller read it
    seen: list[ExecutionState | None] = []

    borrowed = await world.borrow().write("x-1", failing(seen))

    assert borrowed.outcome is BorrowOutcome.SAVED
    assert seen == [moved], "decided on the state under the lease, not the stale one"
    assert borrowed.found == moved
    stored = await world.executions.load("x-1")
    assert stored is not None and stored.status is ExecutionStatus.ERROR
    assert borrowed.saved == stored
    [released] = world.leases.released
    assert (released.holder_id, released.generation) == (HOLDER, 3)
    assert await world.leases.holder("x-1") is None


async def test_a_taken_lease_reads_and_writes_nothing_and_leaves_the_holder_alone(
    world: World,
) -> None:
    """W3: another holder advances the execution; the borrower stays out of its way."""
    await world.store(running(world.clock))
    theirs = await world.leases.acquire("x-1", "worker-a", ttl_ms=TTL_MS)
    seen: list[ExecutionState | None] = []

    borrowed = await world.borrow().write("x-1", failing(seen))

    assert (borrowed.outcome, borrowed.found, borrowed.saved) == (
        BorrowOutcome.LEASE_TAKEN,
        None,
        None,
    )
    assert seen == [], "the transition never ran"
    assert world.leases.released == []
    assert await world.leases.holder("x-1") == theirs
    stored = await world.executions.load("x-1")
    assert stored is not None and stored.status is ExecutionStatus.RUNNING


async def test_a_state_changed_since_the_caller_saw_it_is_left_as_it_is(world: World) -> None:
    """A conditional write: only over the checkpoint the caller decided on."""
    seen_by_caller = running(world.clock)
    await world.store(seen_by_caller)
    moved = seen_by_caller.transition(ExecutionStatus.COMPLETED, now_ms=1)
    await world.store(moved)
    seen: list[ExecutionState | None] = []

    borrowed = await world.borrow().write("x-1", failing(seen), expect=seen_by_caller)

    assert (borrowed.outcome, borrowed.found) == (BorrowOutcome.STATE_CHANGED, moved)
    assert seen == []
    assert await world.executions.load("x-1") == moved
    assert len(world.leases.released) == 1
    assert await world.leases.holder("x-1") is None


async def test_expecting_no_execution_refuses_one_that_appeared(world: World) -> None:
    await world.store(running(world.clock))

    async def create(current: ExecutionState | None) -> ExecutionState | None:
        raise AssertionError("must not run over an existing execution")

    borrowed = await world.borrow().write("x-1", create, expect=None)

    assert borrowed.outcome is BorrowOutcome.STATE_CHANGED
    assert len(world.leases.released) == 1


async def test_expecting_no_execution_creates_one_with_a_full_write(world: World) -> None:
    created = running(world.clock)

    async def create(current: ExecutionState | None) -> ExecutionState | None:
        assert current is None
        return created

    borrowed = await world.borrow().write("x-1", create, expect=None)

    assert (borrowed.outcome, borrowed.found) == (BorrowOutcome.SAVED, None)
    assert await world.executions.load("x-1") == created
    assert await world.leases.holder("x-1") is None


async def test_a_transition_with_nothing_to_write_saves_nothing(world: World) -> None:
    done = running(world.clock).transition(ExecutionStatus.COMPLETED, now_ms=1)
    await world.store(done)

    async def nothing(current: ExecutionState | None) -> ExecutionState | None:
        return None

    borrowed = await world.borrow().write("x-1", nothing)

    assert (borrowed.outcome, borrowed.found, borrowed.saved) == (
        BorrowOutcome.NOTHING_TO_WRITE,
        done,
        None,
    )
    assert await world.executions.load("x-1") == done
    assert len(world.leases.released) == 1


async def test_a_refused_fenced_save_raises_and_the_lease_is_still_released(
    world: World,
) -> None:
    """W4: the lease was revoked while borrowed (an operator delete); the save is refused."""
    await world.store(running(world.clock))

    async def revoked_meanwhile(current: ExecutionState | None) -> ExecutionState | None:
        world.leases.revoke("x-1", advance_generation=True)
        assert current is not None
        return current.transition(ExecutionStatus.ERROR, now_ms=1)

    with pytest.raises(ExecutionLeaseError):
        await world.borrow().write("x-1", revoked_meanwhile)

    assert len(world.leases.released) == 1
    stored = await world.executions.load("x-1")
    assert stored is not None and stored.status is ExecutionStatus.RUNNING


async def test_the_lease_is_released_when_the_transition_refuses(world: World) -> None:
    await world.store(running(world.clock))

    async def refuse(current: ExecutionState | None) -> ExecutionState | None:
        raise OperatorActionRefusedError("it moved on meanwhile")

    with pytest.raises(OperatorActionRefusedError):
        await world.borrow().write("x-1", refuse)

    assert len(world.leases.released) == 1
    assert await world.leases.holder("x-1") is None


async def test_a_failed_release_is_logged_and_the_saved_outcome_stands(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """The write is done; the lease lapses by itself within its TTL."""
    await world.store(running(world.clock))
    world.leases.release_error = ConnectionError("Connection closed by server")

    with caplog.at_level(logging.WARNING, logger="plaita.lease"):
        borrowed = await world.borrow().write("x-1", failing([]))

    assert borrowed.outcome is BorrowOutcome.SAVED
    stored = await world.executions.load("x-1")
    assert stored is not None and stored.status is ExecutionStatus.ERROR
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        f"event=lease.borrow_release_failed execution_id=x-1 holder={HOLDER} generation=2 "
    )
    assert f"lapses by itself within {TTL_MS} ms" in record.getMessage()
    held = await world.leases.holder("x-1")
    assert held is not None and held.holder_id == HOLDER
    world.clock.advance(TTL_MS / 1000)
    assert await world.leases.holder("x-1") is None


async def test_a_failed_release_does_not_hide_the_transitions_error(world: World) -> None:
    await world.store(running(world.clock))
    world.leases.release_error = ConnectionError("Connection closed by server")

    async def refuse(current: ExecutionState | None) -> ExecutionState | None:
        raise OperatorActionRefusedError("it moved on meanwhile")

    with pytest.raises(OperatorActionRefusedError):
        await world.borrow().write("x-1", refuse)

    assert len(world.leases.released) == 1


async def test_held_yields_the_lease_and_releases_it_after_the_body(world: World) -> None:
    async with world.borrow().held("x-1") as lease:
        assert lease is not None and lease.holder_id == HOLDER
        assert await world.leases.holder("x-1") == lease
    assert world.leases.released == [lease]
    assert await world.leases.holder("x-1") is None


async def test_held_yields_none_for_a_taken_lease_and_releases_nothing(world: World) -> None:
    theirs = await world.leases.acquire("x-1", "worker-a", ttl_ms=TTL_MS)

    async with world.borrow().held("x-1") as lease:
        assert lease is None

    assert world.leases.released == []
    assert await world.leases.holder("x-1") == theirs


async def test_held_releases_the_lease_when_the_body_raises(world: World) -> None:
    with pytest.raises(ConnectionError):
        async with world.borrow().held("x-1"):
            raise ConnectionError("storage unreachable")

    assert len(world.leases.released) == 1
    assert await world.leases.holder("x-1") is None
