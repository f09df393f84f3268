"""The event log on Redis: records with a TTL, a type index and a notification stream (V1)."""

from __future__ import annotations

import json

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import RedisGroupStream, StreamEntry
from plaita.application.ports import EventNotification
from plaita.domain.events import Event

EVENT_FILTER_GROUP = "plaita-event-filter"
EVENT_TTL_SECONDS = 7 * 24 * 60 * 60
_EVENT_ID_FIELD = "event_id"


class RedisEventLog:
    """EventLog on ``{ns}:ev:{<id>}``, ``{ns}:evidx:type:<type>`` and ``{ns}:events:stream``."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        *,
        group: str = EVENT_FILTER_GROUP,
        ttl_seconds: int = EVENT_TTL_SECONDS,
    ) -> None:
        self._client = client
        self._keys = keys
        self._ttl_seconds = ttl_seconds
        self._stream = RedisGroupStream(client, keys.event_notifications(), group)
        # Per consumer: the last pending id handed out, until its backlog is drained.
        self._backlog: dict[str, str] = {}
        self._caught_up: set[str] = set()

    async def append(self, event: Event) -> None:
        record = json.dumps(event.to_json(), separators=(",", ":"))
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.set(self._keys.event(event.event_id), record, ex=self._ttl_seconds)
            pipe.zadd(
                self._keys.events_by_type(event.event_type), {event.event_id: event.timestamp_ms}
            )
            pipe.xadd(self._stream.stream, {_EVENT_ID_FIELD: event.event_id})
            await pipe.execute()

    async def get(self, event_id: str) -> Event | None:
        record = await self._client.get(self._keys.event(event_id))
        return None if record is None else Event.from_json(json.loads(record))

    async def ensure_group(self) -> None:
        await self._stream.ensure_group()

    async def read_notifications(
        self, consumer: str, *, count: int, block_ms: int
    ) -> list[EventNotification]:
        while consumer not in self._caught_up:
            start = self._backlog.get(consumer, "0")
            entries = await self._stream.read(consumer, start=start, count=count, block_ms=0)
            if not entries:
                self._caught_up.add(consumer)
                break
            self._backlog[consumer] = entries[-1][0]
            backlog = _notifications(entries)
            if backlog:
                return backlog
        entries = await self._stream.read(consumer, start=">", count=count, block_ms=block_ms)
        return _notifications(entries)

    async def ack_notification(self, notification_id: str) -> None:
        await self._stream.ack(notification_id)

    async def reclaim_notifications(
        self, consumer: str, *, min_idle_ms: int, count: int
    ) -> list[EventNotification]:
        entries = await self._stream.claim_idle(consumer, min_idle_ms=min_idle_ms, count=count)
        return _notifications(entries)


def _notifications(entries: list[StreamEntry]) -> list[EventNotification]:
    # An entry without an event id (deleted from the stream) cannot be handled; skip it.
    return [
        EventNotification(notification_id=message_id, event_id=fields[_EVENT_ID_FIELD])
        for message_id, fields in entries
        if _EVENT_ID_FIELD in fields
    ]
