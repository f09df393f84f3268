"""Housekeeping as background tasks of a long-running plaita service: the index janitor
(V7), the trim of the event notification stream (S5) and, with SQL storage, the sweep of
expired state rows (S4).

The event-filter service starts them beside its read loop; they stop with the same stop
event. The janitor's plan (interval, budget, on/off) comes from ``PLAITA_JANITOR_*``, the
trim interval from ``PLAITA_STREAM_TRIM_INTERVAL_SECONDS``, through the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from plaita.application.ports import EventLog
from plaita.domain.outages import Backoff
from plaita.domain.retention import NOTIFICATION_GRACE_MS
from plaita.entrypoints.container import Container
from plaita.entrypoints.stream_trimming import keep_trimming, trim_backoff


async def run_index_janitor(container: Container, stop: asyncio.Event) -> None:
    """Prune the event and subscription indexes every interval until ``stop`` is set.

    Returns at once (after a WARNING) when the janitor is disabled; a failing tick is logged
    and retried at the next one, so the service beside it keeps running.
    """
    await container.index_janitor().run(stop)


async def run_notification_trim(container: Container, stop: asyncio.Event) -> None:
    """Trim the notification stream below what every event filter still needs, keeping
    what is younger than the event buses' grace, every interval until ``stop`` (S5)."""
    events: EventLog = container.events()

    async def trim() -> int:
        return await events.trim_notifications(min_age_ms=NOTIFICATION_GRACE_MS)

    every_seconds = container.config.stream_trim_interval_seconds()
    outage = container.outages().loop(
        "notification_trim",
        consequence="acked notifications stay in the stream a little longer; none is lost",
        backoff=trim_backoff(every_seconds),
    )
    await keep_trimming(
        trim, stop, stream="notifications", outage=outage, every_seconds=every_seconds
    )


#: The SQL state sweep: how often, and how many expired records per pass.
SWEEP_EVERY_SECONDS = 60.0
SWEEP_LIMIT = 500

log = logging.getLogger("plaita.janitor")


async def run_state_sweeper(
    container: Container,
    stop: asyncio.Event,
    *,
    every_seconds: float = SWEEP_EVERY_SECONDS,
    limit: int = SWEEP_LIMIT,
) -> None:
    """With SQL storage, delete expired states, tombstones and heartbeats until ``stop`` (S4).

    Redis expires these records itself; a database keeps the rows (reads already treat them
    as absent) until this sweep removes them, at most ``limit`` per pass. Returns at once
    with any other storage. A failing pass is logged and retried at the next one.
    """
    executions = container.executions()
    sweep = getattr(executions, "sweep_expired", None)
    if sweep is None:
        return
    clock = container.clock()
    every_ms = max(1, round(every_seconds * 1000))
    # It passes every interval whatever happens: that is its back-off too.
    outage = container.outages().loop(
        "state_sweeper",
        consequence="expired states, tombstones and heartbeats stay in the database meanwhile "
        "(reads already treat them as absent)",
        backoff=Backoff(base_ms=every_ms, cap_ms=every_ms),
    )
    while not stop.is_set():
        try:
            removed = await sweep(now_ms=clock.now_ms(), limit=limit)
        except Exception as exc:
            outage.failed(exc)
            removed = 0
        else:
            outage.succeeded()
        if removed:
            log.info("event=sweep.done removed=%d", removed)
        if removed < limit:  # a full pass means more is due: go again at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_seconds)
