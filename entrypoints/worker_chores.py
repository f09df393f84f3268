"""The worker's background chores beside the read loop: the delay-queue mover and the gauges.

Neither touches a carrier the loop is dispatching; both stop when ``stop`` is set and never
hold the drain up. They change when timers (W8, V8) or the queue metrics (C5) do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from plaita.application.ports import Clock, DelayQueue, TaskQueue
from plaita.entrypoints.metrics import WorkerMetrics
from plaita.entrypoints.worker_support import pause

# The loop's logger: operators filter the worker's events under plaita.worker.
log = logging.getLogger("plaita.worker")

#: Without a ``dlq_length`` probe the DLQ gauge counts at most this many entries.
DLQ_LENGTH_SCAN_LIMIT = 10_000


async def move_due_timers(
    delay: DelayQueue | None, clock: Clock | None, stop: asyncio.Event, *, read_block_ms: int
) -> None:
    """Move due retries, event timeouts and sleep wake-ups into the stream (W8, V8)."""
    if delay is None or clock is None:
        return
    interval = min(0.1, read_block_ms / 1000)
    while not stop.is_set():
        try:
            moved = await delay.move_due(now_ms=clock.now_ms())
        except Exception:
            log.exception("event=timers.move_failed: retrying; due timers wait, none is lost")
            moved = 0
        if not moved:
            await pause(stop, interval)


async def refresh_gauges(
    queue: TaskQueue,
    metrics: WorkerMetrics,
    stop: asyncio.Event,
    *,
    dlq_length: Callable[[], Awaitable[int]] | None,
    every_seconds: float,
) -> None:
    """Refresh the queue length, pending and dead-letter gauges every ``every_seconds`` (C5)."""
    if not metrics.enabled:
        return
    while not stop.is_set():
        try:
            stats = await queue.stats()
            if dlq_length is not None:
                dead_letters = await dlq_length()
            else:
                dead_letters = len(await queue.dead_letters(count=DLQ_LENGTH_SCAN_LIMIT))
            metrics.queue_sizes(
                length=stats.length, pending=stats.pending, dead_letters=dead_letters
            )
        except Exception as exc:
            log.warning("event=metrics.refresh_failed error=%r: retrying", exc)
        await pause(stop, every_seconds)
