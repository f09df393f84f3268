"""The lease watchdog of one dispatch: renew at TTL/3, self-fence, heartbeat the open node.

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
from collections.abc import Awaitable, Callable

import attrs

from plaita.application.ports import Clock, Counters, ExecutionRepository, LeaseManager, TaskQueue
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.errors import ExecutionLeaseError
from plaita.domain.events import Event
from plaita.domain.lease import Lease, RenewalAction, RenewalOutcome, decide_renewal

log = logging.getLogger("plaita.worker.step")

#: How long a dispatch waits for its watchdog to end once told to stop. A watchdog still in a
#: store call then ends at its next look at the flag; it renews nothing meanwhile.
KEEPER_STOP_SECONDS = 1.0


@attrs.define
class Dispatch:
    """What one dispatch holds: its lease, the lost-lease signal and the counters it read."""

    envelope: TaskEnvelope
    lease: Lease
    lost: threading.Event
    message_id: str | None = None
    writes: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    counters: Counters = attrs.field(factory=Counters)
    #: The node being run right now, for the watchdog's heartbeat (W15); None between nodes.
    open_node: str | None = None
    #: Completed steps of the execution when the open node began (names its wait, V6).
    steps: int = 0
    #: An inbox event the wait just registered takes at once, with its subscription (V6).
    ready_event: tuple[str, Event] | None = None
    #: The dispatch recorded its attempt (W2) and must end it when it returns.
    attempt_begun: bool = False


class KeeperRun:
    """One dispatch's running watchdog; ``stop`` ends it within a bounded time."""

    def __init__(self) -> None:
        self.stopped = False
        self._task: asyncio.Task[None] | None = None

    def attach(self, task: asyncio.Task[None]) -> None:
        self._task = task

    async def stop(self, execution_id: str) -> None:
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
                execution_id,
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
    ) -> None:
        self._leases = leases
        self._executions = executions
        self._queue = queue
        self._clock = clock
        self._holder_id = holder_id
        self._lease_ttl_ms = lease_ttl_ms
        self._sleep = sleep

    def start(self, dispatch: Dispatch) -> KeeperRun:
        """Start the watchdog of ``dispatch``; stop it with ``KeeperRun.stop``."""
        run = KeeperRun()
        run.attach(asyncio.create_task(self.keep(dispatch, run)))
        return run

    async def keep(self, dispatch: Dispatch, run: KeeperRun) -> None:
        ttl_seconds = self._lease_ttl_ms / 1000
        last_renewed = self._clock.monotonic()
        wait = ttl_seconds / 3
        while not run.stopped:
            await self._sleep(wait)
            if run.stopped:
                return
            sent_at = self._clock.monotonic()
            try:
                renewed = await self._leases.renew(dispatch.lease, ttl_ms=self._lease_ttl_ms)
                outcome = RenewalOutcome.RENEWED if renewed else RenewalOutcome.LOST
            except Exception as exc:  # a store outage: the domain says how long to keep trying
                log.warning(
                    "event=lease.renew_failed execution_id=%s error=%r: retrying until the "
                    "lease's safe window closes",
                    dispatch.lease.execution_id,
                    exc,
                )
                outcome = RenewalOutcome.FAILED
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
                    dispatch.lease.execution_id,
                    dispatch.lease.generation,
                )
                dispatch.lost.set()
                return
            last_renewed, wait = decision.last_renewed_at, decision.next_attempt_in
            if run.stopped:
                return
            if decision.refresh_liveness and dispatch.message_id is not None:
                # W5/I0: a live holder's carrier must never look idle to a reclaiming peer.
                with contextlib.suppress(Exception):
                    await self._queue.touch(self._holder_id, [dispatch.message_id])
            node_id = dispatch.open_node
            if (
                decision.refresh_liveness
                and node_id is not None
                and not run.stopped
                and not await self._heartbeat(dispatch, node_id)
            ):
                return  # fenced off: the lease is gone, nothing left to renew

    async def _heartbeat(self, dispatch: Dispatch, node_id: str) -> bool:
        """Record the open node's progress under the fence (W15); False when fenced off."""
        lease = dispatch.lease
        try:
            async with dispatch.writes:
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
            dispatch.lost.set()
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
