"""The event-filter service: turn event notifications into resume carriers (V4)."""

from __future__ import annotations

import asyncio
import logging
import time

from plaita.application.ports import EventLog, EventNotification
from plaita.application.use_cases.events import FilterEvent

log = logging.getLogger("plaita.event_filter")


class EventFilterService:
    def __init__(
        self,
        *,
        events: EventLog,
        filter_event: FilterEvent,
        consumer: str,
        read_block_ms: int = 1000,
        claim_min_idle_ms: int = 60_000,
        batch: int = 64,
    ) -> None:
        self._events = events
        self._filter = filter_event
        self._consumer = consumer
        self._read_block_ms = read_block_ms
        self._claim_min_idle_ms = claim_min_idle_ms
        self._batch = batch

    async def run(self, stop: asyncio.Event) -> None:
        await self._events.ensure_group()
        log.info("event=event_filter.started consumer=%s", self._consumer)
        next_reclaim = 0.0
        while not stop.is_set():
            notifications: list[EventNotification] = []
            if time.monotonic() >= next_reclaim:
                next_reclaim = time.monotonic() + self._claim_min_idle_ms / 2000
                notifications = await self._events.reclaim_notifications(
                    self._consumer, min_idle_ms=self._claim_min_idle_ms, count=self._batch
                )
            if not notifications:
                notifications = await self._events.read_notifications(
                    self._consumer, count=self._batch, block_ms=self._read_block_ms
                )
            for notification in notifications:
                await self._handle(notification)
        log.info("event=event_filter.stopped consumer=%s", self._consumer)

    async def _handle(self, notification: EventNotification) -> None:
        try:
            await self._filter(notification.event_id)
        except Exception:
            # Left pending: the notification is retried when it is reclaimed, never dropped.
            log.exception(
                "event=event_filter.failed event_id=%s notification_id=%s: left pending",
                notification.event_id,
                notification.notification_id,
            )
            return
        await self._events.ack_notification(notification.notification_id)
