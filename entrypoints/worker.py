"""The worker loop: read carriers, dispatch up to ``concurrency`` at once, ack after each (W1, W2).

One asyncio loop serves many executions; carriers of one execution are serialised inside the
process, and across processes by the execution lease. Around the loop: the registry record
(W16), the drain on SIGTERM/SIGINT (W17), the dead-letter guard on reclaim (W2, W9), the disk
guard (W18) and the metrics (C5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from plaita.application.ports import (
    Clock,
    DelayQueue,
    Delivery,
    LeaseManager,
    TaskQueue,
    WorkerInstance,
    WorkerRegistry,
)
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.dead_letter_guard import GuardDeadLetter
from plaita.application.use_cases.dispatch import DispatchResult, Disposition
from plaita.application.use_cases.process_task import ProcessTask
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.worker_state import (
    STATUS_FLUSH_RETRIES,
    STOPPED_TOMBSTONE_TTL_SECONDS,
    ChangeOutcome,
    DrainAction,
    DrainEvent,
    DrainState,
    WorkerStatus,
    change_status,
    drain_step,
    is_dispatchable,
    registration_retry_delay,
    registration_status,
    registry_writes_allowed,
)
from plaita.entrypoints.disk_guard import DiskGuard
from plaita.entrypoints.metrics import NoMetrics, WorkerMetrics

log = logging.getLogger("plaita.worker")

#: A heartbeat at least this often, whatever the lease TTL (W16).
MAX_HEARTBEAT_SECONDS = 5.0
#: A registry record outlives this many missed heartbeats.
RECORD_TTL_HEARTBEATS = 3
#: Pause between the immediate retries of a drain/stop status write (A45-03).
STATUS_FLUSH_PAUSE_SECONDS = 0.05
#: Back-off after a failed read or reclaim: doubles from the first value up to the second.
READ_RETRY_SECONDS = (0.1, 5.0)
#: Without a ``dlq_length`` probe the DLQ gauge counts at most this many entries.
DLQ_LENGTH_SCAN_LIMIT = 10_000

Sleep = Callable[[float], Awaitable[None]]


class KeyedLocks:
    """One asyncio lock per key, dropped when nobody holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class Presence:
    """This worker's registry record (W16): starting → running → draining → stopping → stopped.

    Other workers read it to decide whether this one is a live lease holder (W5); only
    ``running`` counts. A failed start-up registration does not stop the worker: it retries in
    the background (1 s → 30 s, A2R19-03) while the worker consumes, and until it succeeds the
    record does not say ``running``. Every change goes through the domain's status machine;
    draining and stopping are written at once, not at the next heartbeat.
    """

    def __init__(
        self,
        registry: WorkerRegistry,
        *,
        instance_id: str,
        clock: Clock,
        lease_ttl_ms: int,
        generations: CarrierGenerations | None = None,
        metrics: WorkerMetrics | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.instance_id = instance_id
        self.status = WorkerStatus.STARTING
        self.registered = False
        self.registration_failures = 0
        self.heartbeat_seconds = min(lease_ttl_ms / 3000, MAX_HEARTBEAT_SECONDS)
        self.record_ttl_ms = max(1, round(RECORD_TTL_HEARTBEATS * self.heartbeat_seconds * 1000))
        self._registry = registry
        self._clock = clock
        self._generations = generations or CarrierGenerations()
        self._metrics = metrics or NoMetrics()
        self._sleep = sleep
        self._started_ms = clock.now_ms()
        self._written = False
        # Registration, heartbeats, drain and stop write one after another, each with the
        # status current when it writes: a slow ``running`` write never lands after ``draining``.
        self._writing = asyncio.Lock()
        self._closing = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None

    @property
    def dispatchable(self) -> bool:
        return self.registered and is_dispatchable(self.status)

    async def announce(self) -> None:
        """Write ``starting`` (best effort: ``start`` registers whatever happened here)."""
        async with self._writing:
            await self._put(self.status, what="announce")

    async def start(self) -> None:
        """Register as ``running``; when that fails, keep trying in the background."""
        async with self._writing:
            if not await self._register():
                self.registration_failures = 1
        self._keeper = asyncio.create_task(self._keep())

    async def drain(self) -> None:
        async with self._writing:
            await self._change(WorkerStatus.DRAINING)

    async def stop(self) -> None:
        """Stop retrying and heartbeating first, then write stopping and stopped, then remove.

        The stopped record (5 s) is written before the key is deleted: if the delete fails the
        key still says stopped, never running (A46-01).
        """
        self._closing.set()
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        async with self._writing:
            await self._change(WorkerStatus.STOPPING)
            tombstone_ms = STOPPED_TOMBSTONE_TTL_SECONDS * 1000
            await self._change(WorkerStatus.STOPPED, ttl_ms=tombstone_ms)
            if self._written:
                try:
                    await self._registry.remove(self.instance_id)
                except Exception as exc:
                    log.error(
                        "event=registry.unregister_failed instance=%s error=%r: the record "
                        "says stopped and expires in %d s",
                        self.instance_id,
                        exc,
                        STOPPED_TOMBSTONE_TTL_SECONDS,
                    )
            # Closed is never written: it shuts the gate on every later write (A46-03).
            self.status = change_status(self.status, WorkerStatus.CLOSED).status

    async def _keep(self) -> None:
        while True:
            if self.registered:
                wait = self.heartbeat_seconds
            else:
                wait = registration_retry_delay(self.registration_failures)
            if await self._pause(wait):
                return
            async with self._writing:
                if self._closing.is_set() or not registry_writes_allowed(self.status):
                    return
                if not self.registered:
                    if await self._register():
                        self.registration_failures = 0
                    else:
                        self.registration_failures += 1
                elif not await self._put(self.status, what="heartbeat"):
                    log.warning(
                        "event=registry.heartbeat_failed instance=%s: retrying at the next "
                        "heartbeat; the record expires after %d ms without one",
                        self.instance_id,
                        self.record_ttl_ms,
                    )

    async def _register(self) -> bool:
        target = registration_status(self.status)
        if target is None:
            return True
        if not await self._put(target, what="register"):
            log.error(
                "event=registry.register_failed instance=%s attempt=%d: consuming anyway; "
                "other workers do not count this one as running until it registers, retrying "
                "in %g s",
                self.instance_id,
                self.registration_failures + 1,
                registration_retry_delay(self.registration_failures + 1),
            )
            return False
        self.status = change_status(self.status, target).status
        self.registered = True
        log.info("event=registry.registered instance=%s status=%s", self.instance_id, self.status)
        return True

    async def _change(self, requested: WorkerStatus, *, ttl_ms: int | None = None) -> None:
        change = change_status(self.status, requested)
        if change.outcome is not ChangeOutcome.APPLIED:
            return
        self.status = change.status
        if not change.write_now or not self._written:
            return
        for attempt in range(1 + STATUS_FLUSH_RETRIES):
            if await self._put(change.status, ttl_ms=ttl_ms, what="flush"):
                return
            if attempt < STATUS_FLUSH_RETRIES:
                await self._sleep(STATUS_FLUSH_PAUSE_SECONDS)
        log.error(
            "event=registry.status_flush_failed instance=%s status=%s: the record keeps its "
            "last status until it expires (%d ms)",
            self.instance_id,
            change.status,
            self.record_ttl_ms,
        )

    async def _put(self, status: WorkerStatus, *, what: str, ttl_ms: int | None = None) -> bool:
        now_ms = self._clock.now_ms()
        record = WorkerInstance(
            instance_id=self.instance_id,
            status=status.value,
            heartbeat_ms=now_ms,
            started_ms=self._started_ms,
            config_family=self._generations.config_family or "",
            config_generation=self._generations.config_generation or "",
            budget_generation=self._generations.budget_generation or "",
        )
        try:
            await self._registry.put(record, ttl_ms=ttl_ms or self.record_ttl_ms)
        except Exception as exc:
            log.debug(
                "event=registry.write_failed instance=%s what=%s error=%r",
                self.instance_id,
                what,
                exc,
            )
            return False
        # A write that reached the store may need undoing at stop, even after a drain.
        self._written = True
        self.registered = self.registered or status is not WorkerStatus.STARTING
        self._metrics.heartbeat(now_ms / 1000)
        return True

    async def _pause(self, seconds: float) -> bool:
        """Sleep, or return early once stop began; whether it did."""
        closing = asyncio.ensure_future(self._closing.wait())
        sleeping = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait({closing, sleeping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (closing, sleeping):
                task.cancel()
        return self._closing.is_set()


class Worker:
    def __init__(
        self,
        *,
        queue: TaskQueue,
        process: ProcessTask,
        consumer: str,
        delay: DelayQueue | None = None,
        clock: Clock | None = None,
        concurrency: int = 16,
        read_block_ms: int = 1000,
        claim_min_idle_ms: int = 60_000,
        max_deliveries: int = 5,
        leases: LeaseManager | None = None,
        guard: GuardDeadLetter | None = None,
        presence: Presence | None = None,
        metrics: WorkerMetrics | None = None,
        disk_guard: DiskGuard | None = None,
        drain_timeout_seconds: float = 30.0,
        dlq_length: Callable[[], Awaitable[int]] | None = None,
        gauges_every_seconds: float = 10.0,
    ) -> None:
        self._queue = queue
        self._process = process
        self._delay = delay
        self._clock = clock
        self._consumer = consumer
        self._concurrency = concurrency
        self._read_block_ms = read_block_ms
        self._claim_min_idle_ms = claim_min_idle_ms
        self._max_deliveries = max_deliveries
        self._leases = leases
        #: Without a guard every dead letter is released unguarded (library and test use).
        self._guard = guard
        self._presence = presence
        self._metrics = metrics or NoMetrics()
        self._disk_guard = disk_guard
        self._drain_timeout_seconds = drain_timeout_seconds
        self._dlq_length = dlq_length
        self._gauges_every_seconds = gauges_every_seconds
        self._inflight: set[asyncio.Task[None]] = set()
        self._locks = KeyedLocks()
        self._drain = DrainState()

    @property
    def drain_state(self) -> DrainState:
        return self._drain

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then finish the dispatches already running (W17)."""
        helpers: list[asyncio.Task[None]] = []
        try:
            if self._presence is not None:
                await self._presence.announce()
            await self._queue.ensure_group()
            if self._presence is not None:
                await self._presence.start()
            self._metrics.worker_up(True)
            log.info(
                "event=worker.started consumer=%s concurrency=%d", self._consumer, self._concurrency
            )
            draining = asyncio.create_task(self._drain_on(stop))
            helpers = [
                draining,
                asyncio.create_task(self._move_due_timers(stop)),
                asyncio.create_task(self._refresh_gauges(stop)),
            ]
            await self._consume(stop)
            # The draining record is written as the signal arrives; make sure it was.
            await draining
            await self._finish_drain()
        finally:
            for helper in helpers:
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper
            await self._abandon_unfinished()
            if self._presence is not None:
                await self._presence.stop()
            self._metrics.worker_up(False)
            log.info("event=worker.stopped consumer=%s", self._consumer)

    # --- drain (W17) ---------------------------------------------------------------------

    def _note_stop(self) -> None:
        if self._drain.reading:
            self._drain = drain_step(self._drain, DrainEvent.SIGNAL_RECEIVED).state
            self._metrics.worker_up(False)
            log.info(
                "event=worker.draining consumer=%s in_flight=%d: no more reads; waiting for "
                "the running dispatches (at most %g s)",
                self._consumer,
                len(self._inflight),
                self._drain_timeout_seconds,
            )

    async def _drain_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._note_stop()
        if self._presence is not None:
            await self._presence.drain()

    async def _finish_drain(self) -> None:
        running = {task for task in self._inflight if not task.done()}
        if not running:
            return
        _, unfinished = await asyncio.wait(running, timeout=self._drain_timeout_seconds)
        if unfinished:
            # I2: the timeout ends the waiting, not the steps; they stay unacked (I3).
            self._drain = drain_step(self._drain, DrainEvent.DRAIN_TIMEOUT).state
            log.warning(
                "event=worker.drain_timeout consumer=%s still_running=%d timeout_s=%g: exiting "
                "without acking them; their carriers stay pending and another worker replays "
                "them from the last checkpoint (raise --drain-timeout-seconds to wait longer)",
                self._consumer,
                len(unfinished),
                self._drain_timeout_seconds,
            )

    async def _abandon_unfinished(self) -> None:
        unfinished = [task for task in self._inflight if not task.done()]
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.gather(*unfinished, return_exceptions=True)

    # --- reading -------------------------------------------------------------------------

    async def _consume(self, stop: asyncio.Event) -> None:
        next_reclaim = 0.0
        failures = 0
        while True:
            if stop.is_set():
                self._note_stop()
            if not self._drain.reading:
                return
            if len(self._inflight) >= self._concurrency:
                await self._wait_for_a_slot(stop)
                continue
            if self._disk_guard is not None and not self._disk_guard.allows():
                await _pause(stop, self._disk_guard.poll_seconds)
                continue
            free = self._concurrency - len(self._inflight)
            try:
                deliveries: list[Delivery] = []
                if time.monotonic() >= next_reclaim:
                    next_reclaim = time.monotonic() + self._claim_min_idle_ms / 2000
                    deliveries = await self._queue.reclaim(
                        self._consumer, min_idle_ms=self._claim_min_idle_ms, count=free
                    )
                if not deliveries:
                    deliveries = await self._queue.read(
                        self._consumer, count=free, block_ms=self._read_block_ms
                    )
            except Exception as exc:
                failures += 1
                wait = min(READ_RETRY_SECONDS[1], READ_RETRY_SECONDS[0] * 2 ** (failures - 1))
                log.warning(
                    "event=worker.read_failed consumer=%s error=%r: retrying in %g s",
                    self._consumer,
                    exc,
                    wait,
                )
                await _pause(stop, wait)
                continue
            failures = 0
            if stop.is_set():
                self._note_stop()
            self._start_dispatches(deliveries)

    def _start_dispatches(self, deliveries: list[Delivery]) -> None:
        gated = []
        for delivery in deliveries:
            step = drain_step(self._drain, DrainEvent.READ_RETURNED)
            self._drain = step.state
            if step.action is not DrainAction.DISPATCH:
                gated.append(delivery.message_id)
                continue
            task = asyncio.create_task(self._handle(delivery))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        if gated:
            # I1: read after the drain began: neither dispatched nor acked; it stays pending
            # and another worker reclaims it.
            log.warning(
                "event=worker.drain_read_gate consumer=%s left_pending=%d message_ids=%s",
                self._consumer,
                len(gated),
                ",".join(gated),
            )

    async def _wait_for_a_slot(self, stop: asyncio.Event) -> None:
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({*self._inflight, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()

    # --- one carrier ---------------------------------------------------------------------

    async def _handle(self, delivery: Delivery) -> None:
        try:
            result = await self._dispatch(delivery)
        except Exception:
            log.exception(
                "event=worker.dispatch_crashed message_id=%s execution_id=%s: left pending, "
                "it will be reclaimed after claim_min_idle_ms",
                delivery.message_id,
                None if delivery.envelope is None else delivery.envelope.execution_id,
            )
            self._metrics.crashed()
            self._drain = drain_step(self._drain, DrainEvent.DISPATCH_ABORTED).state
            return
        step = drain_step(self._drain, DrainEvent.DISPATCH_COMPLETED)
        self._drain = step.state
        if result is None or step.action is not DrainAction.ACK:
            return
        try:
            await self._settle(delivery, result)
        except Exception as exc:
            log.warning(
                "event=worker.settle_failed message_id=%s outcome=%s error=%r: the carrier "
                "stays pending; when it is reclaimed, its repeat meets the checkpoint and is "
                "absorbed",
                delivery.message_id,
                result.outcome,
                exc,
            )

    async def _dispatch(self, delivery: Delivery) -> DispatchResult | None:
        """Run one carrier; its result to settle, or None when it was dealt with already."""
        envelope = delivery.envelope
        if envelope is None:
            await self._dead_letter(delivery, delivery.problem or "undecodable entry", refused=True)
            return None
        if delivery.reclaimed:
            if await self._lease_is_live(envelope):
                # A live holder's carrier: running it would only meet the lease, and counting
                # it towards the DLQ would burn the carrier while its execution runs (#50).
                self._metrics.reclaim_skipped()
                log.info(
                    "event=reclaim.skipped_live_lease message_id=%s execution_id=%s "
                    "deliveries=%d: left pending while the lease holder works",
                    delivery.message_id,
                    envelope.execution_id,
                    delivery.delivery_count,
                )
                return None
            if delivery.delivery_count > self._max_deliveries:
                await self._dead_letter(
                    delivery,
                    f"delivered {delivery.delivery_count} times, more than --max-deliveries "
                    f"{self._max_deliveries}",
                )
                return None
        if self._clock is not None and _first_event_resume(delivery):
            self._metrics.resumed((self._clock.now_ms() - envelope.timestamp_ms) / 1000)
        async with self._locks.hold(envelope.execution_id):
            return await self._process(
                envelope, message_id=delivery.message_id, reclaimed=delivery.reclaimed
            )

    async def _lease_is_live(self, envelope: TaskEnvelope) -> bool:
        if self._leases is None:
            return False
        execution_id = envelope.execution_id
        try:
            with tenant_scope(envelope.tenant_id):
                return await self._leases.holder(execution_id) is not None
        except Exception as exc:
            log.warning(
                "event=reclaim.lease_lookup_failed execution_id=%s error=%r: left pending",
                execution_id,
                exc,
            )
            return True

    async def _dead_letter(self, delivery: Delivery, reason: str, *, refused: bool = False) -> None:
        """Every way to the DLQ goes through the guard (W9).

        ``refused``: the carrier was refused for what it is (undecodable, too new, too old, the
        wrong flow), so a recovery copy would be refused again and is never made.
        """
        if self._guard is None:
            await self._queue.dead_letter(delivery, reason)
            self._metrics.dead_lettered("unguarded")
            log.error(
                "event=worker.dead_lettered message_id=%s reason=%r", delivery.message_id, reason
            )
            return
        outcome = await self._guard(delivery, reason, schema_rejected=refused)
        if outcome.released:
            self._metrics.dead_lettered(outcome.reason)
        else:
            self._metrics.guard_kept(outcome.reason)

    async def _settle(self, delivery: Delivery, result: DispatchResult) -> None:
        envelope = delivery.envelope
        assert envelope is not None
        if result.disposition is Disposition.ACK:
            await self._queue.ack(delivery.message_id)
        elif result.disposition is Disposition.DEAD_LETTER:
            await self._dead_letter(delivery, f"{result.outcome}: {result.detail}", refused=True)
        self._metrics.dispatched(result.outcome, result.disposition.value)
        level = logging.INFO if result.disposition is Disposition.ACK else logging.WARNING
        log.log(
            level,
            "event=worker.dispatched message_id=%s execution_id=%s kind=%s outcome=%s "
            "disposition=%s detail=%r",
            delivery.message_id,
            envelope.execution_id,
            envelope.resume_type or envelope.kind,
            result.outcome,
            result.disposition.value,
            result.detail,
        )

    # --- background ----------------------------------------------------------------------

    async def _move_due_timers(self, stop: asyncio.Event) -> None:
        """Move due retries, event timeouts and sleep wake-ups into the stream (W8, V8)."""
        if self._delay is None or self._clock is None:
            return
        interval = min(0.1, self._read_block_ms / 1000)
        while not stop.is_set():
            try:
                moved = await self._delay.move_due(now_ms=self._clock.now_ms())
            except Exception:
                log.exception("event=timers.move_failed: retrying; due timers wait, none is lost")
                moved = 0
            if not moved:
                await _pause(stop, interval)

    async def _refresh_gauges(self, stop: asyncio.Event) -> None:
        if not self._metrics.enabled:
            return
        while not stop.is_set():
            try:
                stats = await self._queue.stats()
                if self._dlq_length is not None:
                    dead_letters = await self._dlq_length()
                else:
                    dead_letters = len(await self._queue.dead_letters(count=DLQ_LENGTH_SCAN_LIMIT))
                self._metrics.queue_sizes(
                    length=stats.length, pending=stats.pending, dead_letters=dead_letters
                )
            except Exception as exc:
                log.warning("event=metrics.refresh_failed error=%r: retrying", exc)
            await _pause(stop, self._gauges_every_seconds)


def _first_event_resume(delivery: Delivery) -> bool:
    envelope = delivery.envelope
    first = delivery.delivery_count == 1 and not delivery.reclaimed
    return first and envelope is not None and envelope.resume_type is ResumeType.EVENT


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``stop`` is set: every back-off is interruptible (I5)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
