"""The worker loop: read carriers, dispatch up to ``concurrency`` at once, ack after each (W1, W2).

One asyncio loop serves many executions; carriers of one execution are serialised inside the
process, and across processes by the execution lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from plaita.application.ports import Clock, DelayQueue, Delivery, TaskQueue
from plaita.application.use_cases.process_task import DispatchResult, Disposition, ProcessTask

log = logging.getLogger("plaita.worker")


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
    ) -> None:
        self._queue = queue
        self._process = process
        self._delay = delay
        self._clock = clock
        self._consumer = consumer
        self._concurrency = concurrency
        self._read_block_ms = read_block_ms
        self._claim_min_idle_ms = claim_min_idle_ms
        self._inflight: set[asyncio.Task[None]] = set()
        self._locks = KeyedLocks()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then finish the dispatches already running (W17)."""
        await self._queue.ensure_group()
        log.info(
            "event=worker.started consumer=%s concurrency=%d", self._consumer, self._concurrency
        )
        next_reclaim = 0.0
        timers = asyncio.create_task(self._move_due_timers(stop))
        try:
            while not stop.is_set():
                if len(self._inflight) >= self._concurrency:
                    await asyncio.wait(self._inflight, return_when=asyncio.FIRST_COMPLETED)
                    continue
                free = self._concurrency - len(self._inflight)
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
                if stop.is_set():
                    # Read after the drain began: neither dispatched nor acked; it stays
                    # pending and another worker reclaims it.
                    break
                for delivery in deliveries:
                    task = asyncio.create_task(self._dispatch(delivery))
                    self._inflight.add(task)
                    task.add_done_callback(self._inflight.discard)
        finally:
            timers.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await timers
            if self._inflight:
                await asyncio.gather(*self._inflight, return_exceptions=True)
            log.info("event=worker.stopped consumer=%s", self._consumer)

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
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)

    async def _dispatch(self, delivery: Delivery) -> None:
        envelope = delivery.envelope
        if envelope is None:
            await self._queue.dead_letter(delivery, delivery.problem or "undecodable entry")
            log.error(
                "event=worker.dead_lettered message_id=%s reason=%r",
                delivery.message_id,
                delivery.problem,
            )
            return
        try:
            async with self._locks.hold(envelope.execution_id):
                result = await self._process(
                    envelope, message_id=delivery.message_id, reclaimed=delivery.reclaimed
                )
        except Exception:
            log.exception(
                "event=worker.dispatch_crashed message_id=%s execution_id=%s: left pending, "
                "it will be reclaimed after claim_min_idle_ms",
                delivery.message_id,
                envelope.execution_id,
            )
            return
        await self._settle(delivery, result)

    async def _settle(self, delivery: Delivery, result: DispatchResult) -> None:
        envelope = delivery.envelope
        assert envelope is not None
        if result.disposition is Disposition.ACK:
            await self._queue.ack(delivery.message_id)
        elif result.disposition is Disposition.DEAD_LETTER:
            await self._queue.dead_letter(delivery, f"{result.outcome}: {result.detail}")
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
