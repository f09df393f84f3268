"""The worker loop: read carriers, dispatch up to ``concurrency`` at once, ack after each (W1, W2).

One asyncio loop serves many executions; carriers of one execution are serialised inside the
process, and across processes by the execution lease. This module is the orchestration, in
the order it happens: start, read, dispatch, settle (ack only after the dispatch returned),
stop. What it orchestrates lives beside it, one concern a module: the registry record (W16,
``worker_registry``), the drain on SIGTERM/SIGINT (W17, ``worker_drain``), reclaim and the
dead-letter guard (W2, W9, ``worker_reclaim``), the delay-queue mover, the gauges and the
DLQ cap's report (``worker_chores``), the task stream's trim (S5, ``stream_trimming``), the
per-execution locks (``worker_support``), the disk guard (W18,
``disk_guard``) and the metrics (C5, through the ``WorkerMetrics`` port).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import attrs

from plaita.application.null_objects import NoMetrics
from plaita.application.outages import StoreOutages
from plaita.application.ports import (
    AlertSink,
    Clock,
    DelayQueue,
    Delivery,
    TaskQueue,
    WorkerMetrics,
)
from plaita.application.use_cases.dead_letter_guard import GuardDeadLetter
from plaita.application.use_cases.step import (
    RECLAIM_SKIPPED,
    DispatchResult,
    Disposition,
    ProcessTask,
)
from plaita.domain.envelope import ResumeType
from plaita.domain.outages import Backoff
from plaita.domain.worker_state import DrainState
from plaita.entrypoints.disk_guard import DiskGuard
from plaita.entrypoints.outages import store_outages
from plaita.entrypoints.stream_trimming import (
    DEFAULT_TRIM_INTERVAL_SECONDS,
    keep_trimming,
    trim_backoff,
)
from plaita.entrypoints.worker_chores import (
    GAUGES_BACKOFF,
    SLOTS_BACKOFF,
    TIMERS_BACKOFF,
    move_due_timers,
    refresh_gauges,
    report_dead_letter_drops,
    sweep_slots,
)
from plaita.entrypoints.worker_drain import Drain
from plaita.entrypoints.worker_reclaim import CarrierSource, DeadLetterRoute
from plaita.entrypoints.worker_registry import Presence
from plaita.entrypoints.worker_support import KeyedLocks, pause

# Presence and KeyedLocks are imported from here by the CLI, the bench and the tests.
__all__ = ["KeyedLocks", "Presence", "Worker"]

log = logging.getLogger("plaita.worker")

#: Back-off after a failed read or reclaim: 0.1 s, doubling up to 5 s.
READ_BACKOFF = Backoff(base_ms=100, cap_ms=5_000)


@attrs.frozen
class WorkerOptions:
    """What the worker runs with (W1, W2, W17), as configured; logged when it starts."""

    consumer: str
    concurrency: int
    read_block_ms: int
    claim_min_idle_ms: int
    drain_timeout_seconds: float
    gauges_every_seconds: float
    trim_every_seconds: float
    slot_sweep_every_seconds: float


class Worker:
    """Reads, dispatches and settles carriers until stopped; see the module docstring."""

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
        claim_min_idle_ms: int = 5_000,
        guard: GuardDeadLetter | None = None,
        presence: Presence | None = None,
        metrics: WorkerMetrics | None = None,
        disk_guard: DiskGuard | None = None,
        drain_timeout_seconds: float = 30.0,
        gauges_every_seconds: float = 10.0,
        alerts: AlertSink | None = None,
        trim_every_seconds: float = DEFAULT_TRIM_INTERVAL_SECONDS,
        outages: StoreOutages | None = None,
        sweep_slots: Callable[[], Awaitable[int]] | None = None,
        slot_sweep_every_seconds: float = 5.0,
    ) -> None:
        self.options = WorkerOptions(
            consumer=consumer,
            concurrency=concurrency,
            read_block_ms=read_block_ms,
            claim_min_idle_ms=claim_min_idle_ms,
            drain_timeout_seconds=drain_timeout_seconds,
            gauges_every_seconds=gauges_every_seconds,
            trim_every_seconds=trim_every_seconds,
            slot_sweep_every_seconds=slot_sweep_every_seconds,
        )
        self._sweep_slots = sweep_slots
        self._queue = queue
        self._process = process
        self._delay = delay
        self._clock = clock
        self._presence = presence
        #: One WARNING per store outage for all of this worker's loops, one INFO at its end.
        self._outages = outages or store_outages()
        self._metrics = metrics or NoMetrics()
        self._dead_letters = DeadLetterRoute(
            queue, guard, self._metrics, alerts=alerts, clock=clock
        )
        self._disk_guard = disk_guard
        self._gauges_every_seconds = gauges_every_seconds
        self._inflight: set[asyncio.Task[None]] = set()
        self._locks = KeyedLocks()
        self._drain = Drain(
            consumer=consumer, timeout_seconds=drain_timeout_seconds, metrics=self._metrics
        )

    @property
    def drain_state(self) -> DrainState:
        return self._drain.state

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
                "event=worker.started consumer=%s concurrency=%d read_block_ms=%d "
                "claim_min_idle_ms=%d drain_timeout_seconds=%g",
                self.options.consumer,
                self.options.concurrency,
                self.options.read_block_ms,
                self.options.claim_min_idle_ms,
                self.options.drain_timeout_seconds,
            )
            draining = asyncio.create_task(self._drain_on(stop))
            helpers = [
                draining,
                asyncio.create_task(
                    move_due_timers(
                        self._delay,
                        self._clock,
                        stop,
                        read_block_ms=self.options.read_block_ms,
                        outage=self._outages.loop(
                            "timers",
                            consequence="due timers, retries and timeouts wait; none is lost",
                            backoff=TIMERS_BACKOFF,
                        ),
                    )
                ),
                asyncio.create_task(
                    refresh_gauges(
                        self._queue,
                        self._metrics,
                        stop,
                        every_seconds=self.options.gauges_every_seconds,
                        outage=self._outages.loop(
                            "gauges",
                            consequence="the queue gauges keep their last values",
                            backoff=GAUGES_BACKOFF,
                        ),
                    )
                ),
                asyncio.create_task(report_dead_letter_drops(self._queue, self._metrics, stop)),
                asyncio.create_task(
                    keep_trimming(
                        self._queue.trim_acknowledged,
                        stop,
                        stream="tasks",
                        every_seconds=self.options.trim_every_seconds,
                        outage=self._outages.loop(
                            "stream_trim",
                            consequence="acked carriers stay in the stream a little longer",
                            backoff=trim_backoff(self.options.trim_every_seconds),
                        ),
                    )
                ),
            ]
            if self._sweep_slots is not None:
                helpers.append(
                    asyncio.create_task(
                        sweep_slots(
                            self._sweep_slots,
                            stop,
                            every_seconds=self.options.slot_sweep_every_seconds,
                            outage=self._outages.loop(
                                "slot_sweep",
                                consequence="slots of dead workers are handed on later",
                                backoff=SLOTS_BACKOFF,
                            ),
                        )
                    )
                )
            await self._consume(stop)
            # The draining record is written as the signal arrives; make sure it was.
            await draining
            await self._drain.wait(self._inflight)
        finally:
            for helper in helpers:
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper
            await self._abandon_unfinished()
            if self._presence is not None:
                await self._presence.stop()
            self._metrics.worker_up(False)
            log.info("event=worker.stopped consumer=%s", self.options.consumer)

    # --- stopping (W17) ------------------------------------------------------------------

    async def _drain_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._drain.begin(len(self._inflight))
        if self._presence is not None:
            await self._presence.drain()

    async def _abandon_unfinished(self) -> None:
        unfinished = [task for task in self._inflight if not task.done()]
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.gather(*unfinished, return_exceptions=True)

    # --- reading -------------------------------------------------------------------------

    async def _consume(self, stop: asyncio.Event) -> None:
        source = CarrierSource(
            self._queue,
            self.options.consumer,
            read_block_ms=self.options.read_block_ms,
            claim_min_idle_ms=self.options.claim_min_idle_ms,
        )
        outage = self._outages.loop(
            "read",
            consequence="no carrier is read or reclaimed; unread ones wait in the stream",
            backoff=READ_BACKOFF,
        )
        while True:
            if stop.is_set():
                self._drain.begin(len(self._inflight))
            if not self._drain.reading:
                return
            if len(self._inflight) >= self.options.concurrency:
                await self._wait_for_a_slot(stop)
                continue
            if self._disk_guard is not None and not self._disk_guard.allows():
                await pause(stop, self._disk_guard.poll_seconds)
                continue
            free = self.options.concurrency - len(self._inflight)
            try:
                deliveries = await source.fetch(free)
            except Exception as exc:
                await pause(stop, outage.failed(exc))
                continue
            outage.succeeded()
            if stop.is_set():
                self._drain.begin(len(self._inflight))
            self._start_dispatches(deliveries)

    def _start_dispatches(self, deliveries: list[Delivery]) -> None:
        for delivery in self._drain.admit(deliveries):
            task = asyncio.create_task(self._handle(delivery))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

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
        except Exception as exc:
            execution_id = None if delivery.envelope is None else delivery.envelope.execution_id
            if self._outages.expects(exc):
                # An outage, not a bug: no traceback (the outage itself is logged once).
                log.warning(
                    "event=worker.dispatch_interrupted message_id=%s execution_id=%s error=%r: "
                    "the store did not answer; left pending, it will be reclaimed after "
                    "claim_min_idle_ms",
                    delivery.message_id,
                    execution_id,
                    exc,
                )
            else:
                log.exception(
                    "event=worker.dispatch_crashed message_id=%s execution_id=%s: left "
                    "pending, it will be reclaimed after claim_min_idle_ms",
                    delivery.message_id,
                    execution_id,
                )
            self._metrics.crashed()
            self._drain.aborted()
            return
        # Stepped for every returned dispatch, settled or not: it is no longer in flight.
        may_settle = self._drain.completed()
        if result is None or not may_settle:
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
            await self._dead_letters.send(
                delivery, delivery.problem or "undecodable entry", refused=True
            )
            return None
        if self._clock is not None and _first_event_resume(delivery):
            self._metrics.resumed((self._clock.now_ms() - envelope.timestamp_ms) / 1000)
        async with self._locks.hold(envelope.execution_id):
            return await self._process(
                envelope,
                message_id=delivery.message_id,
                reclaimed=delivery.reclaimed,
                deliveries=delivery.delivery_count,
            )

    async def _settle(self, delivery: Delivery, result: DispatchResult) -> None:
        envelope = delivery.envelope
        assert envelope is not None
        if result.outcome == RECLAIM_SKIPPED:
            # Left pending beside a live lease (W2): the step logged it; it costs nothing.
            self._metrics.reclaim_skipped()
            return
        if result.disposition is Disposition.ACK:
            await self._queue.ack(delivery.message_id)
        elif result.disposition is Disposition.DEAD_LETTER:
            await self._dead_letters.send(
                delivery, f"{result.outcome}: {result.detail}", refused=result.refused
            )
        self._metrics.dispatched(result.outcome, result.disposition.value)
        if result.waited is not None:
            self._metrics.flow_control_waited(result.waited.value)
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


def _first_event_resume(delivery: Delivery) -> bool:
    envelope = delivery.envelope
    first = delivery.delivery_count == 1 and not delivery.reclaimed
    return first and envelope is not None and envelope.resume_type is ResumeType.EVENT
