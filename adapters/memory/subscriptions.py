"""In-memory twin of the Redis subscription store."""

from __future__ import annotations

import json
from collections.abc import Sequence

from plaita.domain.events import EventSubscription


class MemorySubscriptionStore:
    """SubscriptionStore in memory: JSON records and an index by event type."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._by_type: dict[str, set[str]] = {}

    async def add(self, subscription: EventSubscription) -> None:
        record = json.dumps(subscription.to_json(), separators=(",", ":"))
        self._records[subscription.subscription_id] = record
        self._by_type.setdefault(subscription.event_type, set()).add(subscription.subscription_id)

    async def remove(self, subscription_id: str) -> bool:
        subscription = await self.get(subscription_id)
        if subscription is None:
            return False
        del self._records[subscription_id]
        self._by_type.get(subscription.event_type, set()).discard(subscription_id)
        return True

    async def get(self, subscription_id: str) -> EventSubscription | None:
        record = self._records.get(subscription_id)
        return None if record is None else EventSubscription.from_json(json.loads(record))

    async def find(self, event_type: str) -> Sequence[EventSubscription]:
        records = [
            self._records[subscription_id]
            for subscription_id in self._by_type.get(event_type, set())
            if subscription_id in self._records
        ]
        found = [EventSubscription.from_json(json.loads(record)) for record in records]
        # An id re-added under another type still sits in the old index; skip it there.
        matching = [s for s in found if s.event_type == event_type]
        return sorted(matching, key=lambda s: (s.created_at_ms, s.subscription_id))
