"""The background chore that keeps a stream short (S5): the worker runs it on the task
stream, the event filter on the notification stream.

Every interval it asks the adapter to trim the entries every consumer group is done with;
what is pending or not yet delivered is never touched (the adapter's trim guarantees it, in
one atomic step). A failing trim loses nothing — the stream only keeps its acked entries a
little longer — so it is logged and retried after a growing pause, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from plaita.domain.reconcile import failure_backoff_ms
from plaita.entrypoints.worker_support import pause

log = logging.getLogger("plaita.streams")

DEFAULT_TRIM_INTERVAL_SECONDS = 30.0
#: After consecutive failures the pause doubles from the interval up to this many intervals.
_BACKOFF_INTERVALS = 10


async def keep_trimming(
    trim: Callable[[], Awaitable[int]],
    stop: asyncio.Event,
    *,
    stream: str,
    every_seconds: float = DEFAULT_TRIM_INTERVAL_SECONDS,
) -> None:
    """Call ``trim`` every ``every_seconds`` until ``stop`` is set, backing off on failures."""
    interval_ms = max(1, int(every_seconds * 1000))
    failures = 0
    while not stop.is_set():
        try:
            removed = await trim()
        except Exception as exc:
            failures += 1
            wait_ms = failure_backoff_ms(
                failures, base_ms=interval_ms, cap_ms=interval_ms * _BACKOFF_INTERVALS
            )
            log.warning(
                "event=stream.trim_failed stream=%s failures=%d error=%r: nothing is lost, the "
                "stream keeps its acked entries until a trim succeeds; retrying in %g s "
                "(check that Redis is reachable if this repeats)",
                stream,
                failures,
                exc,
                wait_ms / 1000,
            )
            await pause(stop, wait_ms / 1000)
            continue
        failures = 0
        if removed:
            log.info("event=stream.trimmed stream=%s removed=%d", stream, removed)
        await pause(stop, interval_ms / 1000)
