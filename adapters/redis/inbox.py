"""The inbox on Redis: events kept per (tenant, correlation id) for waits that begin later (V6).

``{ns}:inbox:{<correlation_id>}`` is a list of event JSON (the newest ``max_entries``) and
``…:taken`` a hash ``<execution_id>\\x1f<event_id>`` → the subscription that took the event.
Both live in the tenant's namespace and share the correlation id as hash tag, so one script
touches both. TTLs only ever extend.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.domain.events import Event, InboxEntry

#: Events kept per correlation id; an older event falls out when a newer one arrives.
INBOX_MAX_ENTRIES = 1000
#: As long as the event record itself (7 days).
INBOX_TTL_SECONDS = 7 * 24 * 60 * 60


class RedisInbox:
    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        *,
        ttl_seconds: int = INBOX_TTL_SECONDS,
        max_entries: int = INBOX_MAX_ENTRIES,
    ) -> None:
        _check_limits(ttl_seconds, max_entries)
        self._client = client
        self._keys = keys
        self._ttl_ms = ttl_seconds * 1000
        self._max_entries = max_entries
        self._add = client.register_script(read_script("inbox_add"))
        self._take = client.register_script(read_script("inbox_take"))

    async def add(self, event: Event) -> None:
        if event.correlation_id is None:
            return
        record = json.dumps(event.to_json(), separators=(",", ":"))
        await self._add(
            keys=[
                self._keys.inbox(event.tenant_id, event.correlation_id),
                self._keys.inbox_taken(event.tenant_id, event.correlation_id),
            ],
            args=[record, self._max_entries, self._ttl_ms],
        )

    async def entries(
        self, tenant_id: str, correlation_id: str, execution_id: str
    ) -> Sequence[InboxEntry]:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.lrange(self._keys.inbox(tenant_id, correlation_id), 0, -1)
            pipe.hgetall(self._keys.inbox_taken(tenant_id, correlation_id))
            records, taken = await pipe.execute()
        holders = {text(field): text(holder) for field, holder in taken.items()}
        events = [Event.from_json(json.loads(record)) for record in records]
        return [
            InboxEntry(event, holders.get(taken_field(execution_id, event.event_id)))
            for event in events
        ]

    async def take(
        self,
        tenant_id: str,
        correlation_id: str,
        execution_id: str,
        event_id: str,
        subscription_id: str,
    ) -> str:
        holder = await self._take(
            keys=[
                self._keys.inbox_taken(tenant_id, correlation_id),
                self._keys.inbox(tenant_id, correlation_id),
            ],
            args=[taken_field(execution_id, event_id), subscription_id, self._ttl_ms],
        )
        return text(holder)


def taken_field(execution_id: str, event_id: str) -> str:
    """The taken hash's field: ids may hold ':' but never the unit separator."""
    return f"{execution_id}\x1f{event_id}"


def _check_limits(ttl_seconds: int, max_entries: int) -> None:
    if ttl_seconds <= 0:
        raise ValueError(f"an inbox ttl must be a positive number of seconds, got {ttl_seconds}")
    if max_entries <= 0:
        raise ValueError(f"an inbox keeps at least one event, got max_entries={max_entries}")
