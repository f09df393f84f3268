"""The event log (V1, V5, V7): stored events and the notification stream event filters read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from plaita.domain.events import Event, EventQuery


@attrs.frozen
class EventNotification:
    """One entry of the notification stream: which stored event to filter."""

    notification_id: str
    event_id: str


class EventLog(Protocol):
    """Events by id, type and time, each announced once on the notification stream."""

    async def append(self, event: Event) -> None:
        """Store the event record and notify event filters, atomically."""
        ...

    async def get(self, event_id: str) -> Event | None:
        """An event by id, or None."""
        ...

    async def ensure_group(self) -> None:
        """Create the notification stream and the event-filter consumer group if missing."""
        ...

    async def read_notifications(
        self, consumer: str, *, count: int, block_ms: int
    ) -> list[EventNotification]:
        """New notifications for ``consumer`` (first its own pending ones after a restart)."""
        ...

    async def ack_notification(self, notification_id: str) -> None:
        """Mark a notification handled."""
        ...

    async def reclaim_notifications(
        self, consumer: str, *, min_idle_ms: int, count: int
    ) -> list[EventNotification]:
        """Take over notifications left pending by a crashed event filter."""
        ...

    async def trim_notifications(self, *, min_age_ms: int) -> int:
        """Remove notifications every group acked that are ``min_age_ms`` old (S5); how many.

        Like ``TaskQueue.trim_acknowledged`` over every group of the stream: nothing pending
        and nothing undelivered is removed. ``min_age_ms`` is the grace of the readers without
        a group (every event bus reads the stream with plain reads): what the groups are done
        with stays that long for them.
        """
        ...

    async def list(self, query: EventQuery) -> Sequence[Event]:
        """Stored events matching every field the query names, oldest first (V5, V7).

        Candidates come from the type index when a type is named, else from the time index;
        at most ``query.limit``.
        """
        ...
