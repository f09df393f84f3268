"""Writing to one execution under a lease of its own, between worker steps (W3, W4).

An operator retry, the dead-letter guard's terminal write, the reaper's and a delete change
an execution that a worker may be advancing at that moment. Each borrows the execution's
lease as its own holder, reads the state again under it (what it saw before may be stale),
lets the caller decide the new state, saves it with the lease's fence and gives the lease
back. A taken lease or a state that is not the one the caller expected is a named outcome;
a refused fenced save raises ``ExecutionLeaseError`` (the lease was revoked or lapsed while
borrowed), after the lease was given back.

A release that fails is logged and does not change the outcome: the write is done, and the
lease lapses by itself within its TTL. An operator's or the reaper's holder id is not a
registered worker's, so a carrier meeting that lease meanwhile is left pending, never acked
(W5); the dead-letter guard, which borrows as its worker, only writes terminal states.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Literal

import attrs

from plaita.application.ports import ExecutionRepository, LeaseManager
from plaita.domain.execution import ExecutionState
from plaita.domain.history import HistoryEntry
from plaita.domain.lease import Lease

log = logging.getLogger("plaita.lease")

#: The caller's decision on the state found under the lease: the state to save, or None
#: to write nothing. It may raise to refuse; the lease is released all the same.
Transition = Callable[[ExecutionState | None], Awaitable[ExecutionState | None]]


class BorrowOutcome(enum.StrEnum):
    SAVED = "saved"
    #: The transition found nothing to write (already terminal, say): nothing was saved.
    NOTHING_TO_WRITE = "nothing_to_write"
    #: Another holder has the lease: nothing was read or written.
    LEASE_TAKEN = "lease_taken"
    #: The state under the lease is not the one the caller expected: nothing was written.
    STATE_CHANGED = "state_changed"


class Expect(enum.Enum):
    #: Any stored state, or none, goes to the transition.
    ANY = "any"


@attrs.frozen
class Borrowed:
    outcome: BorrowOutcome
    #: The state found under the lease (None when there was none or the lease was taken).
    found: ExecutionState | None = None
    #: The state saved (``SAVED`` only).
    saved: ExecutionState | None = None


class BorrowedLease:
    """acquire as ``holder_id`` → reload → the caller's transition → fenced save → release."""

    def __init__(
        self,
        executions: ExecutionRepository,
        leases: LeaseManager,
        holder_id: str,
        lease_ttl_ms: int,
    ) -> None:
        self._executions = executions
        self._leases = leases
        self.holder_id = holder_id
        self._lease_ttl_ms = lease_ttl_ms

    async def write(
        self,
        execution_id: str,
        transition: Transition,
        *,
        expect: ExecutionState | Literal[Expect.ANY] | None = Expect.ANY,
        history: Sequence[HistoryEntry] = (),
    ) -> Borrowed:
        """Save what ``transition`` makes of the state stored under the lease.

        ``expect`` makes the write conditional: only over this very state (None: only when
        no execution exists yet), else ``STATE_CHANGED``. ``history`` (an operator's action,
        say) is written with the save, and not at all when nothing is saved.
        """
        async with self.held(execution_id) as lease:
            if lease is None:
                return Borrowed(BorrowOutcome.LEASE_TAKEN)
            current = await self._executions.load(execution_id)
            if expect is not Expect.ANY and current != expect:
                return Borrowed(BorrowOutcome.STATE_CHANGED, current)
            changed = await transition(current)
            if changed is None:
                return Borrowed(BorrowOutcome.NOTHING_TO_WRITE, current)
            await self._executions.save(
                changed, fence=lease.generation, previous=current, history=history
            )
            return Borrowed(BorrowOutcome.SAVED, current, changed)

    @contextlib.asynccontextmanager
    async def held(self, execution_id: str) -> AsyncIterator[Lease | None]:
        """The lease for the body (None when another holder has it), released after it."""
        lease = await self._leases.acquire(execution_id, self.holder_id, ttl_ms=self._lease_ttl_ms)
        try:
            yield lease
        finally:
            if lease is not None:
                await self._release(lease)

    async def _release(self, lease: Lease) -> None:
        try:
            await self._leases.release(lease)
        except Exception as exc:
            log.warning(
                "event=lease.borrow_release_failed execution_id=%s holder=%s generation=%d "
                "error=%r: what was written under it stands; the lease lapses by itself within "
                "%d ms, and the execution's carriers wait until then. If this repeats, check "
                "the connection to the store",
                lease.execution_id,
                lease.holder_id,
                lease.generation,
                exc,
                self._lease_ttl_ms,
            )
