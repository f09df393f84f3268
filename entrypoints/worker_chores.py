"""The worker's background chores beside the read loop: the delay-queue mover, the gauges
and the report of what the DLQ length cap dropped.

None touches a carrier the loop is dispatching; all stop when ``stop`` is set and never
hold the drain up. They change when timers (W8, V8), the queue metrics (C5) or the DLQ
cap's report (W10) do. A store outage makes them back off and report to the process's
``StoreOutages``: one WARNING when it begins, one INFO when it ends, never a traceback per
attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from plaita.application.outages import LoopOutage
from plaita.application.ports import Clock, DelayQueue, TaskQueue, WorkerMetrics
from plaita.domain.outages import Backoff
from plaita.entrypoints.worker_support import pause

# The loop's logger: operators filter the worker's events under plaita.worker.
log = logging.getLogger("plaita.worker")

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
            dead_letters = await queue.dead_letter_length()
            metrics.queue_sizes(
                length=stats.length, pending=stats.pending, dead_letters=dead_letters
            )
        except Exception as exc:
            await wait(stop, max(every_seconds, outage.failed(exc)))
            continue
        outage.succeeded()
        await wait(stop, every_seconds)


#: A failing slot sweep waits up to a minute: expired slots wait for it, none is lost.
SLOTS_BACKOFF = Backoff(base_ms=1_000, cap_ms=60_000)


async def sweep_slots(
    sweep: Callable[[], Awaitable[int]],
    stop: asyncio.Event,
    *,
    every_seconds: float,
    outage: LoopOutage,
    wait: Pause = pause,
) -> None:
    """Free the slots of dead workers and hand them to waiting carriers (E1a)."""
    while not stop.is_set():
        try:
            await sweep()
        except Exception as exc:
            await wait(stop, max(every_seconds, outage.failed(exc)))
            continue
        outage.succeeded()
        await wait(stop, every_seconds)


#: How often the DLQ cap's drops are counted, and how often at most they are warned about.
DLQ_DROPS_EVERY_SECONDS = 10.0
DLQ_DROPS_WARN_EVERY_SECONDS = 60.0


async def report_dead_letter_drops(
    queue: TaskQueue,
    metrics: WorkerMetrics,
    stop: asyncio.Event,
    *,
    every_seconds: float = DLQ_DROPS_EVERY_SECONDS,
    warn_every_seconds: float = DLQ_DROPS_WARN_EVERY_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Count what the DLQ length cap dropped (``plaita_dlq_trimmed_total``) and say so in a
    WARNING at most every ``warn_every_seconds`` (W10): those entries are gone unreplayed.

    The drops are this worker's own (each dead-letter write trims the DLQ in its own atomic
    step); a last report is made when ``stop`` is set, so none goes unsaid.
    """
    counted = 0
    unwarned = 0
    warned_at: float | None = None
    while True:
        stopping = stop.is_set()
        total = await queue.dead_letters_dropped()
        if total > counted:
            metrics.dlq_trimmed(total - counted)
            unwarned += total - counted
            counted = total
        due = warned_at is None or monotonic() - warned_at >= warn_every_seconds
        if unwarned and (due or stopping):
            log.warning(
                "event=dlq.trimmed dropped=%d total=%d: the dead-letter queue is at its length "
                "cap, so its oldest entries were dropped unreplayed; replay or inspect what is "
                "there (`plaita dlq list`), fix what sends carriers there, or raise "
                "--dlq-max-len / PLAITA_DLQ_MAX_LEN",
                unwarned,
                total,
            )
            unwarned, warned_at = 0, monotonic()
        if stopping:
            return
        await pause(stop, every_seconds)
