"""The lease watchdog of one dispatch: renew every min(TTL/3, 2 s), self-fence, heartbeat the
open node.

Split from the worker step (process_task.py) because it runs beside it as its own task and
changes for its own reasons (W3 renewal, W5 carrier liveness, W15 node heartbeat). Every
decision — how long to keep retrying a failing renewal, when to fence itself off — is the
domain's ``decide_renewal``.

Its life is bounded by the dispatch's, whatever the store client does: cancelling a task that
waits on redis-py's asyncio client does not always end it — with a connection killed mid-call
the client may turn the cancellation into a ``ConnectionError`` or a normal return — and a
watchdog that survived its dispatch would renew the lease for ever, so the execution's next
carrier would meet a "live" lease no dispatch holds. So the watchdog looks at its ``stopped``
flag after every await and never renews once it is set, and the dispatch never waits for it
longer than ``KEEPER_STOP_SECONDS`` (issue of a stranded suspended execution, W3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

from plaita.application.ports import Clock, ExecutionRepository, LeaseManager, TaskQueue
from plaita.application.use_cases.step.slots import NO_SLOTS, HeldSlots, SlotGate
from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.lease import (
    Lease,
    RenewalAction,
    RenewalOutcome,
    decide_renewal,
    renewal_interval_seconds,
)

log = logging.getLogger("plaita.worker.step")

#: How long a dispatch waits for its watchdog to end once told to stop. A watchdog still in a
#: store call then ends at its next look at the flag; it renews nothing meanwhile.
KEEPER_STOP_SECONDS = 1.0


class KeeperRun:
    """One dispatch's watchdog, and what the dispatch shares with it — all of it the
    watchdog's own state, changed only through these methods:

    - ``lost``: set once the lease is gone; the running handler sees ``ctx.cancelled`` and the
      dispatch writes no further checkpoint (it fences itself off);
    - ``writing()``: heartbeats and checkpoints of one dispatch never interleave (W15);
    - ``opened(node)`` / ``closed()``: the node whose progress the renewals record (W15).
    """

    def __init__(self, lease: Lease, message_id: str | None) -> None:
        self.lease = lease
        self.message_id = message_id
        self.lost = threading.Event()
        self.stopped = False
        self.open_node: str | None = None
        #: The slots the dispatch holds (E1a): renewed with the lease.
        self.slots = NO_SLOTS
        self._writes = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def holding(self, slots: HeldSlots) -> None:
        self.slots = slots

    def opened(self, node_id: str) -> None:
        self.open_node = node_id

    def closed(self) -> None:
        self.open_node = None

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        async with self._writes:
            yield

    def fence_off(self) -> None:
        self.lost.set()

    def attach(self, task: asyncio.Task[None]) -> None:
        self._task = task

    async def stop(self) -> None:
        """Stop renewing; wait at most ``KEEPER_STOP_SECONDS``. Never swallows the caller's
        own cancellation: ``asyncio.wait`` does not raise the watchdog's outcome."""
        self.stopped = True
        if self._task is None or self._task.done():
            return
        self._task.cancel()
        done, _ = await asyncio.wait({self._task}, timeout=KEEPER_STOP_SECONDS)
        if not done:
            log.warning(
                "event=lease.keeper_slow_to_stop execution_id=%s: the lease watchdog is still "
                "in a store call %.1f s after its dispatch ended; it renews nothing more and "
                "ends when the call returns",
                self.lease.execution_id,
                KEEPER_STOP_SECONDS,
            )


class LeaseKeeper:
    """Keeps one dispatch's lease alive until stopped, or fences the dispatch off."""

    def __init__(
        self,
        *,
        leases: LeaseManager,
        executions: ExecutionRepository,
        queue: TaskQueue,
        clock: Clock,
        holder_id: str,
        lease_ttl_ms: int,
        sleep: Callable[[float], Awaitable[None]],
        slots: SlotGate,
    ) -> None:
        self._leases = leases
        self._slots = slots
        self._executions = executions
        self._queue = queue
        self._clock = clock
        self._holder_id = holder_id
        self._lease_ttl_ms = lease_ttl_ms
        self._sleep = sleep

    def start(self, lease: Lease, message_id: str | None) -> KeeperRun:
        """Start the watchdog of the dispatch holding ``lease``; stop it with ``stop()``."""
        run = KeeperRun(lease, message_id)
        run.attach(asyncio.create_task(self._keep(run)))
        return run

    async def _keep(self, run: KeeperRun) -> None:
        ttl_seconds = self._lease_ttl_ms / 1000
        last_renewed = self._clock.monotonic()
        wait = renewal_interval_seconds(ttl_seconds)
        while not run.stopped:
            await self._sleep(wait)
            if run.stopped:
                return
            sent_at = self._clock.monotonic()
            outcome = await self._renew(run)
            decision = decide_renewal(
                ttl_seconds=ttl_seconds,
                last_renewed_at=last_renewed,
                sent_at=sent_at,
                now=self._clock.monotonic(),
                outcome=outcome,
            )
            if decision.action is RenewalAction.SELF_FENCE:
                log.warning(
                    "event=lease.lost execution_id=%s generation=%s: the lease expired or another "
                    "worker took over; this worker stops advancing the execution",
                    run.lease.execution_id,
                    run.lease.generation,
                )
                run.fence_off()
                return
            last_renewed, wait = decision.last_renewed_at, decision.next_attempt_in
            if run.stopped or not decision.refresh_liveness:
                continue
            if run.message_id is not None:
                # W5/I0: a live holder's carrier must never look idle to a reclaiming peer.
                with contextlib.suppress(Exception):
                    await self._queue.touch(self._holder_id, [run.message_id])
            if run.slots.tables and not run.stopped and not await self._renew_slots(run):
                return  # fenced off: a slot it held is someone else's now
            node_id = run.open_node
            if node_id is not None and not run.stopped and not await self._heartbeat(run, node_id):
                return  # fenced off: the lease is gone, nothing left to renew

    async def _renew(self, run: KeeperRun) -> RenewalOutcome:
        try:
            renewed = await self._leases.renew(run.lease, ttl_ms=self._lease_ttl_ms)
        except Exception as exc:  # a store outage: the domain says how long to keep trying
            log.warning(
                "event=lease.renew_failed execution_id=%s error=%r: retrying until the "
                "lease's safe window closes",
                run.lease.execution_id,
                exc,
            )
            return RenewalOutcome.FAILED
        return RenewalOutcome.RENEWED if renewed else RenewalOutcome.LOST

    async def _renew_slots(self, run: KeeperRun) -> bool:
        """Keep the dispatch's slots as long as its lease (E1a); False when one was lost."""
        expires_ms = self._clock.now_ms() + self._lease_ttl_ms
        try:
            ours = await self._slots.renew(run.slots, expires_ms=expires_ms)
        except Exception as exc:  # a store outage: the next renewal tries again
            log.warning(
                "event=slots.renew_failed execution_id=%s error=%r: retrying at the next "
                "lease renewal",
                run.lease.execution_id,
                exc,
            )
            return True
        if not ours:
            log.warning(
                "event=slots.lost execution_id=%s generation=%s: a slot of this execution "
                "expired and was given to another; this worker stops advancing it, and its "
                "carrier's redelivery takes a slot again",
                run.lease.execution_id,
                run.lease.generation,
            )
            run.fence_off()
        return ours

    async def _heartbeat(self, run: KeeperRun, node_id: str) -> bool:
        """Record the open node's progress under the fence (W15); False when fenced off."""
        lease = run.lease
        try:
            async with run.writing():
                await self._executions.heartbeat(
                    lease.execution_id,
                    fence=lease.generation,
                    node_id=node_id,
                    now_ms=self._clock.now_ms(),
                )
        except ExecutionLeaseError as exc:
            log.warning(
                "event=heartbeat.fenced execution_id=%s generation=%s node_id=%s error=%s: "
                "another worker took over or the execution was deleted; this worker stops "
                "advancing it",
                lease.execution_id,
                lease.generation,
                node_id,
                exc,
            )
            run.fence_off()
            return False
        except Exception as exc:  # a store outage must never stop the lease renewals
            log.warning(
                "event=heartbeat.failed execution_id=%s node_id=%s error=%r: the node's "
                "progress was not recorded; retrying at the next renewal",
                lease.execution_id,
                node_id,
                exc,
            )
        return True
