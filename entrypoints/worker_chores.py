"""The worker's background chores beside the read loop: the delay-queue mover and the gauges.

Neither touches a carrier the loop is dispatching; both stop when ``stop`` is set and never
hold the drain up. They change when timers (W8, V8) or the queue metrics (C5) do. A store
outage makes them back off and report to the process's ``StoreOutages``: one WARNING when it
begins, one INFO when it ends, never a traceback per attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from plaita.application.outages import LoopOutage
from plaita.application.ports import Clock, DelayQueue, TaskQueue
from plaita.domain.outages import Backoff
from plaita.entrypoints.metrics import WorkerMetrics
from plaita.entrypoints.worker_support import pause

#: Without a ``dlq_length`` probe the DLQ gauge counts at most this many entries.
DLQ_LENGTH_SCAN_LIMIT = 10_000
#: After failed moves the mover waits 0.1 s, doubling up to 5 s: due timers are late by at
#: most that much once the store is back.
TIMERS_BACKOFF = Backoff(base_ms=100, cap_ms=5_000)
#: Gauges are refreshed every few seconds anyway; failed refreshes wait up to a minute.
GAUGES_BACKOFF = Backoff(base_ms=1_000, cap_ms=60_000)

Pause = Callable[[asyncio.Event, float], Awaitable[None]]


async def move_due_timers(
    delay: DelayQueue | None,
    clock: Clock | None,
    stop: asyncio.Event,
    *,
    read_block_ms: int,
    outage: LoopOutage,
    wait: Pause = pause,
) -> None:
    """Move due retries, event timeouts and sleep wake-ups into the stream (W8, V8)."""
    if delay is None or clock is None:
        return
    interval = min(0.1, read_block_ms / 1000)
    while not stop.is_set():
        try:
            moved = await delay.move_due(now_ms=clock.now_ms())
        except Exception as exc:
            await wait(stop, outage.failed(exc))
            continue
        outage.succeeded()
        if not moved:
            await wait(stop, interval)


async def refresh_gauges(
    queue: TaskQueue,
    metrics: WorkerMetrics,
    stop: asyncio.Event,
    *,
    dlq_length: Callable[[], Awaitable[int]] | None,
    every_seconds: float,
    outage: LoopOutage,
    wait: Pause = pause,
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
            await wait(stop, max(every_seconds, outage.failed(exc)))
            continue
        outage.succeeded()
        await wait(stop, every_seconds)
