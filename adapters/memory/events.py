"""In-memory twin of the Redis event log: records with a TTL and a notification stream (V1)."""

from __future__ import annotations

import json

from plaita.adapters.memory.streams import Delivered, MemoryGroupStream
from plaita.application.ports import Clock, EventNotification
from plaita.domain.events import Event

EVENT_TTL_MS = 7 * 24 * 60 * 60 * 1000
_EVENT_ID_FIELD = "event_id"


class MemoryEventLog:
    """EventLog in memory; records expire after ``ttl_ms`` of the Clock's wall time."""

    def __init__(self, clock: Clock, *, ttl_ms: int = EVENT_TTL_MS) -> None:
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._records: dict[str, tuple[str, int]] = {}
        self._stream = MemoryGroupStream(clock)
        # Per consumer: the last pending id handed out, until its backlog is drained.
        self._backlog: dict[str, str] = {}
        self._caught_up: set[str] = set()

    def restarted(self) -> MemoryEventLog:
        """The same records and stream as a restarted process sees them: no read positions."""
        twin = MemoryEventLog(self._clock, ttl_ms=self._ttl_ms)
        twin._records = self._records
        twin._stream = self._stream
        return twin

    async def append(self, event: Event) -> None:
        record = json.dumps(event.to_json(), separators=(",", ":"))
        self._records[event.event_id] = (record, self._clock.now_ms() + self._ttl_ms)
        await self._stream.add({_EVENT_ID_FIELD: event.event_id})

    async def get(self, event_id: str) -> Event | None:
        stored = self._records.get(event_id)
        if stored is None:
            return None
        record, expires_at_ms = stored
        if self._clock.now_ms() >= expires_at_ms:
            del self._records[event_id]
            return None
        return Event.from_json(json.loads(record))

    async def ensure_group(self) -> None:
        """The in-memory stream always has its one consumer group."""

    async def read_notifications(
        self, consumer: str, *, count: int, block_ms: int
    ) -> list[EventNotification]:
        if consumer not in self._caught_up:
            after = self._backlog.get(consumer, "0-0")
            backlog = self._stream.read_pending(consumer, after=after, count=count)
            if backlog:
                self._backlog[consumer] = backlog[-1][0]
                return _notifications(backlog)
            self._caught_up.add(consumer)
        delivered = await self._stream.read_new(consumer, count=count, block_ms=block_ms)
        return _notifications(delivered)

    async def ack_notification(self, notification_id: str) -> None:
        self._stream.ack(notification_id)

    async def reclaim_notifications(
        self, consumer: str, *, min_idle_ms: int, count: int
    ) -> list[EventNotification]:
        delivered = self._stream.claim_idle(consumer, min_idle_ms=min_idle_ms, count=count)
        return _notifications(delivered)


def _notifications(delivered: list[Delivered]) -> list[EventNotification]:
    return [
        EventNotification(notification_id=message_id, event_id=fields[_EVENT_ID_FIELD])
        for message_id, fields, _count in delivered
    ]
