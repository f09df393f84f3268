"""Event subscriptions on Redis: one JSON record each, indexed by event type (V1)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text
from plaita.domain.events import EventSubscription


class RedisSubscriptionStore:
    """SubscriptionStore on ``{ns}:sub:{<id>}`` and the set ``{ns}:subs:type:<event_type>``."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    async def add(self, subscription: EventSubscription) -> None:
        record = json.dumps(subscription.to_json(), separators=(",", ":"))
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.set(self._keys.subscription(subscription.subscription_id), record)
            pipe.sadd(
                self._keys.subscriptions_by_type(subscription.event_type),
                subscription.subscription_id,
            )
            await pipe.execute()

    async def remove(self, subscription_id: str) -> bool:
        subscription = await self.get(subscription_id)
        if subscription is None:
            return False
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(self._keys.subscription(subscription_id))
            pipe.srem(self._keys.subscriptions_by_type(subscription.event_type), subscription_id)
            deleted, _ = await pipe.execute()
        return bool(deleted)

    async def get(self, subscription_id: str) -> EventSubscription | None:
        record = await self._client.get(self._keys.subscription(subscription_id))
        return None if record is None else EventSubscription.from_json(json.loads(record))

    async def find(self, event_type: str) -> Sequence[EventSubscription]:
        ids = await self._client.smembers(self._keys.subscriptions_by_type(event_type))
        if not ids:
            return []
        records = await self._client.mget(
            [self._keys.subscription(text(subscription_id)) for subscription_id in ids]
        )
        # An id whose record is gone (removed concurrently) is skipped, not an error, and so is
        # an id re-added under another event type that still sits in this type's index.
        found = [
            EventSubscription.from_json(json.loads(record))
            for record in records
            if record is not None
        ]
        matching = [s for s in found if s.event_type == event_type]
        return sorted(matching, key=lambda s: (s.created_at_ms, s.subscription_id))
