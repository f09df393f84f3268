"""The event-filter service: turn event notifications into resume carriers (V4, V5).

Three loops share one process until SIGTERM/SIGINT sets ``stop``:

- **notifications**: read the notification stream through the consumer group, filter each
  event, ack it only after its resumes were enqueued; notifications a crashed filter left
  pending are reclaimed after ``claim_min_idle_ms`` (ADR 0002);
- **reconciler** (when given): every interval, one ``ReconcileEvents`` round re-scans the
  stored events by time and filters them again, recovering notifications that were lost;
- **background jobs** (the index janitor, when the deployment has one).

Nothing that fails in a loop stops the service: a failed read, filter, ack or round is
retried after a capped back-off; a notification whose filter failed stays pending (never
dropped), a failed round leaves the cursor where it was. The loops report to one
``StoreOutages``: a Redis outage is one WARNING when it begins and one INFO when it ends,
whatever the number of failed attempts in between.

On stop the service reads nothing more and finishes the notification in flight; the rest of
its batch stays pending for another filter to reclaim (or the reconciler to replay). A round
in progress is abandoned — its cursor was not advanced, so the next round replays it. Then
every collaborator that has a ``close()`` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import attrs

from plaita.application.outages import StoreOutages
from plaita.application.ports import EventLog, EventNotification
from plaita.application.use_cases.reconcile_events import ReconcileRound
from plaita.domain.outages import Backoff
from plaita.domain.reconcile import (
    DEFAULT_INTERVAL_MS,
    delay_before_next_round_ms,
    round_backoff,
)
from plaita.entrypoints.outages import store_outages

log = logging.getLogger("plaita.event_filter")

#: Wait ``seconds`` or until the event is set.
Pause = Callable[[asyncio.Event, float], Awaitable[None]]
#: A job that runs until the event is set (the index janitor).
BackgroundJob = Callable[[asyncio.Event], Awaitable[None]]

#: How long stopping waits for the reconciler and background jobs, and for each close().
STOP_TIMEOUT_SECONDS = 10.0
#: After failed reads, filters or acks: 0.1 s, doubling up to 5 s.
NOTIFICATION_BACKOFF = Backoff(base_ms=100, cap_ms=5_000)
#: Before a failed background job is started again: 1 s, doubling up to a minute.
BACKGROUND_BACKOFF = Backoff(base_ms=1_000, cap_ms=60_000)


async def pause_until_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``stop`` is set: every back-off is interruptible."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))


@attrs.define
class FilterStats:
    """Running totals of one service, as its log lines report them."""

    filtered: int = 0
    filter_failures: int = 0
    read_failures: int = 0
    rounds: int = 0
    failed_rounds: int = 0
    #: Events filtered again by rounds that succeeded; a failed round adds nothing (V5).
    replayed: int = 0
    recovered_resumes: int = 0


class EventFilterService:
    def __init__(
        self,
        *,
        events: EventLog,
        filter_event: Callable[[str], Awaitable[int]],
        consumer: str,
        read_block_ms: int = 1000,
        claim_min_idle_ms: int = 5_000,
        batch: int = 64,
        reconcile: Callable[[], Awaitable[ReconcileRound]] | None = None,
        reconcile_interval_ms: int = DEFAULT_INTERVAL_MS,
        background: Mapping[str, BackgroundJob] | None = None,
        closeables: Sequence[object] = (),
        pause: Pause = pause_until_stopped,
        monotonic: Callable[[], float] = time.monotonic,
        outages: StoreOutages | None = None,
    ) -> None:
        self._events = events
        self._filter = filter_event
        self._consumer = consumer
        self._read_block_ms = read_block_ms
        self._claim_min_idle_ms = claim_min_idle_ms
        self._batch = batch
        self._reconcile = reconcile
        self._reconcile_interval_ms = reconcile_interval_ms
        self._background = dict(background or {})
        self._closeables = closeables
        self._pause = pause
        self._monotonic = monotonic
        self._outages = outages or store_outages()
        self.stats = FilterStats()

    async def run(self, stop: asyncio.Event) -> None:
        tasks: list[asyncio.Task[None]] = []
        try:
            await self._events.ensure_group()
            log.info(
                "event=event_filter.started consumer=%s claim_min_idle_ms=%d reconcile=%s "
                "background=%s",
                self._consumer,
                self._claim_min_idle_ms,
                f"every {self._reconcile_interval_ms / 1000:g} s" if self._reconcile else "off",
                ",".join(sorted(self._background)) or "none",
            )
            consumer = asyncio.create_task(self._consume(stop), name="notifications")
            tasks.append(consumer)
            for name, job in self._background.items():
                tasks.append(asyncio.create_task(self._keep_running(name, job, stop), name=name))
            if self._reconcile is not None:
                rounds = self._reconcile_rounds(self._reconcile, stop)
                tasks.append(asyncio.create_task(rounds, name="reconciler"))
            await consumer
            others = tasks[1:]
            if others:
                _, late = await asyncio.wait(others, timeout=STOP_TIMEOUT_SECONDS)
                for task in late:
                    log.warning(
                        "event=event_filter.stop_timeout task=%s: still running %.0f s after "
                        "stop; cancelled",
                        task.get_name(),
                        STOP_TIMEOUT_SECONDS,
                    )
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close()
        log.info(
            "event=event_filter.stopped consumer=%s filtered=%d filter_failures=%d rounds=%d "
            "failed_rounds=%d replayed=%d",
            self._consumer,
            self.stats.filtered,
            self.stats.filter_failures,
            self.stats.rounds,
            self.stats.failed_rounds,
            self.stats.replayed,
        )

    # --- notifications (V4) -----------------------------------------------------------------

    async def _consume(self, stop: asyncio.Event) -> None:
        # Reads and filters back off each on its own streak; their outages are one.
        reads = self._outages.loop(
            "notifications",
            consequence="no notification is read; published events wait in the stream and "
            "the reconciler replays them",
            backoff=NOTIFICATION_BACKOFF,
        )
        filters = self._outages.loop(
            "filter",
            consequence=f"notifications whose filter failed stay pending; another event "
            f"filter reclaims them after claim_min_idle_ms={self._claim_min_idle_ms}",
            backoff=NOTIFICATION_BACKOFF,
        )
        next_reclaim = 0.0
        while not stop.is_set():
            # A blocked read is never cancelled: entries Redis hands to a cancelled
            # XREADGROUP would sit pending on this consumer until reclaimed. So a stop waits
            # at most read_block_ms for the read to return.
            try:
                notifications: list[EventNotification] = []
                if self._monotonic() >= next_reclaim:
                    next_reclaim = self._monotonic() + self._claim_min_idle_ms / 2000
                    notifications = await self._events.reclaim_notifications(
                        self._consumer, min_idle_ms=self._claim_min_idle_ms, count=self._batch
                    )
                if not notifications:
                    notifications = await self._events.read_notifications(
                        self._consumer, count=self._batch, block_ms=self._read_block_ms
                    )
            except Exception as exc:
                self.stats.read_failures += 1
                await self._pause(stop, reads.failed(exc))
                continue
            reads.succeeded()
            for index, notification in enumerate(notifications):
                if stop.is_set():
                    log.info(
                        "event=event_filter.left_pending consumer=%s count=%d: stopping; another "
                        "event filter reclaims them after claim_min_idle_ms=%d, and the "
                        "reconciler replays their events",
                        self._consumer,
                        len(notifications) - index,
                        self._claim_min_idle_ms,
                    )
                    break
                failure = await self._handle(notification)
                if failure is None:
                    filters.succeeded()
                    continue
                delay = filters.failed(
                    failure,
                    event_id=notification.event_id,
                    notification_id=notification.notification_id,
                )
                await self._pause(stop, delay)

    async def _handle(self, notification: EventNotification) -> Exception | None:
        """Filter and ack one notification; the error that stopped it, left pending."""
        try:
            await self._filter(notification.event_id)
        except Exception as exc:
            # Left pending: retried when reclaimed (and replayed by the reconciler), never
            # dropped.
            self.stats.filter_failures += 1
            return exc
        self.stats.filtered += 1
        try:
            await self._events.ack_notification(notification.notification_id)
        except Exception as exc:
            # Its resumes are enqueued: filtered again when reclaimed, a harmless duplicate.
            return exc
        return None

    # --- the reconciler (V5) ----------------------------------------------------------------

    async def _reconcile_rounds(
        self, reconcile: Callable[[], Awaitable[ReconcileRound]], stop: asyncio.Event
    ) -> None:
        rounds = self._outages.loop(
            "reconcile",
            consequence="lost notifications are not recovered meanwhile; the cursor stays and "
            "the next round replays the same window",
            backoff=round_backoff(self._reconcile_interval_ms),
        )
        while not stop.is_set():
            round_task = asyncio.ensure_future(reconcile())
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({round_task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if not round_task.done():
                # Its cursor was not advanced: the next round, here or after a restart,
                # replays the same window.
                round_task.cancel()
                await asyncio.gather(round_task, return_exceptions=True)
                log.info("event=reconcile.round_abandoned: stopping; the cursor stays")
                return
            try:
                done = round_task.result()
            except Exception as exc:
                self.stats.failed_rounds += 1
                delay_ms = round(rounds.failed(exc) * 1000)
            else:
                rounds.succeeded()
                self.stats.rounds += 1
                self.stats.replayed += done.replayed
                self.stats.recovered_resumes += done.resumes
                delay_ms = delay_before_next_round_ms(
                    self._reconcile_interval_ms,
                    consecutive_failures=0,
                    caught_up=done.window.caught_up,
                )
                log.info(
                    "event=reconcile.round_done since_ms=%d until_ms=%d replayed=%d resumes=%d "
                    "pages=%d cursor_ms=%d caught_up=%s",
                    done.window.since_ms,
                    done.window.until_ms,
                    done.replayed,
                    done.resumes,
                    done.pages,
                    done.cursor_ms,
                    done.window.caught_up,
                )
            await self._pause(stop, delay_ms / 1000)

    # --- background jobs and shutdown -------------------------------------------------------

    async def _keep_running(self, name: str, job: BackgroundJob, stop: asyncio.Event) -> None:
        restarts = self._outages.loop(
            name,
            consequence=f"the {name} job stopped; it is started again after a back-off",
            backoff=BACKGROUND_BACKOFF,
        )
        while not stop.is_set():
            try:
                await job(stop)
            except Exception as exc:
                await self._pause(stop, restarts.failed(exc))
            else:
                if not stop.is_set():
                    # A job returns early when it is switched off; it has said why itself.
                    log.info(
                        "event=event_filter.background_ended job=%s: it returned before the "
                        "service stopped and is not restarted",
                        name,
                    )
                return

    async def _close(self) -> None:
        seen: set[int] = set()
        for collaborator in (self._events, self._filter, self._reconcile, *self._closeables):
            if collaborator is None or id(collaborator) in seen:
                continue
            seen.add(id(collaborator))
            close = getattr(collaborator, "close", None)
            if not callable(close):
                continue
            try:
                closing = close()
                if inspect.isawaitable(closing):
                    await asyncio.wait_for(closing, STOP_TIMEOUT_SECONDS)
            except Exception as exc:
                log.warning(
                    "event=event_filter.close_failed collaborator=%s error=%r: exiting anyway",
                    type(collaborator).__name__,
                    exc,
                )
