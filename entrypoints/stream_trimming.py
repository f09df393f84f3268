"""The background chore that keeps a stream short (S5): the worker runs it on the task
stream, the event filter on the notification stream.

Every interval it asks the adapter to trim the entries every consumer group is done with;
what is pending or not yet delivered is never touched (the adapter's trim guarantees it, in
one atomic step). A failing trim loses nothing — the stream only keeps its acked entries a
little longer — so it backs off and reports to the process's ``StoreOutages`` (one WARNING
per outage, one INFO at its end), never fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from plaita.application.outages import LoopOutage
from plaita.domain.outages import Backoff
from plaita.entrypoints.worker_support import pause

log = logging.getLogger("plaita.streams")

DEFAULT_TRIM_INTERVAL_SECONDS = 30.0
#: After consecutive failures the pause doubles from the interval up to this many intervals.
_BACKOFF_INTERVALS = 10

Pause = Callable[[asyncio.Event, float], Awaitable[None]]


def trim_backoff(every_seconds: float) -> Backoff:
    """From one interval, doubling up to ten: a store outage slows the trims, never stops them."""
    interval_ms = max(1, int(every_seconds * 1000))
    return Backoff(base_ms=interval_ms, cap_ms=interval_ms * _BACKOFF_INTERVALS)


async def keep_trimming(
    trim: Callable[[], Awaitable[int]],
    stop: asyncio.Event,
    *,
    stream: str,
    outage: LoopOutage,
    every_seconds: float = DEFAULT_TRIM_INTERVAL_SECONDS,
    wait: Pause = pause,
) -> None:
    """Call ``trim`` every ``every_seconds`` until ``stop`` is set, backing off on failures."""
    while not stop.is_set():
        try:
            removed = await trim()
        except Exception as exc:
            await wait(stop, max(every_seconds, outage.failed(exc, stream=stream)))
            continue
        outage.succeeded()
        if removed:
            log.info("event=stream.trimmed stream=%s removed=%d", stream, removed)
        await wait(stop, every_seconds)
