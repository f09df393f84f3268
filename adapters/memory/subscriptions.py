"""In-memory twin of the Redis subscription store: records and the same four indexes (V7)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from plaita.domain.events import (
    EventSubscription,
    SubscriptionIndex,
    SubscriptionQuery,
    choose_subscription_index,
)

#: An index: (which one, its value); ``None`` is the index of every subscription.
_IndexName = tuple[SubscriptionIndex, str] | None


class MemorySubscriptionStore:
    """SubscriptionStore and IndexJanitor in memory: JSON records and the four indexes.

    Listing picks the index the way the Redis store does (the smallest the query names) and
    then applies every filter, so both answer every query alike. Records only leave through
    ``remove``, which clears their index entries with them, so these indexes never hold a
    dead member and ``prune_indexes`` always finds nothing to prune — on Redis a dead member
    needs an eviction or a hand-deleted key.
    """

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._indexes: dict[_IndexName, dict[str, int]] = {}

    async def add(self, subscription: EventSubscription) -> None:
        old = await self.get(subscription.subscription_id)
        if old is not None:
            self._unindex(old)
        record = json.dumps(subscription.to_json(), separators=(",", ":"))
        self._records[subscription.subscription_id] = record
        for name in _index_names(subscription):
            self._indexes.setdefault(name, {})[subscription.subscription_id] = (
                subscription.created_at_ms
            )

    async def remove(self, subscription_id: str) -> bool:
        subscription = await self.get(subscription_id)
        if subscription is None:
            return False
        del self._records[subscription_id]
        self._unindex(subscription)
        return True

    async def get(self, subscription_id: str) -> EventSubscription | None:
        record = self._records.get(subscription_id)
        return None if record is None else EventSubscription.from_json(json.loads(record))

    async def find(self, event_type: str) -> Sequence[EventSubscription]:
        return self._read(
            (SubscriptionIndex.TYPE, event_type), SubscriptionQuery(event_type=event_type), None
        )

    async def find_for_event(
        self, event_type: str, correlation_id: str | None
    ) -> Sequence[EventSubscription]:
        """The type's subscriptions with ``correlation_id`` or with none, oldest first."""
        return [
            subscription
            for subscription in await self.find(event_type)
            if subscription.correlation_id in (None, correlation_id)
        ]

    def _read(
        self, name: _IndexName, query: SubscriptionQuery, limit: int | None
    ) -> list[EventSubscription]:
        members = self._indexes.get(name, {})
        ordered = sorted(members, key=lambda i: (members[i], i))
        found = [
            EventSubscription.from_json(json.loads(self._records[i]))
            for i in ordered
            if i in self._records
        ]
        matching = [s for s in found if query.matches(s)]
        return matching if limit is None else matching[:limit]

    def _unindex(self, subscription: EventSubscription) -> None:
        for name in _index_names(subscription):
            members = self._indexes.get(name)
            if members is None:
                continue
            members.pop(subscription.subscription_id, None)
            if not members:
                del self._indexes[name]

    # `list` and what follows come last: below it, `list` in an annotation names this method.
    async def list(self, query: SubscriptionQuery) -> Sequence[EventSubscription]:
        named = {
            index: value
            for index, value in (
                (SubscriptionIndex.CORRELATION, query.correlation_id),
                (SubscriptionIndex.NODE, query.node_id),
                (SubscriptionIndex.FLOW, query.flow_id),
                (SubscriptionIndex.TYPE, query.event_type),
            )
            if value is not None
        }
        sizes = {
            index: len(self._indexes.get((index, value), {})) for index, value in named.items()
        }
        chosen = choose_subscription_index(query, sizes)
        name: _IndexName = None if chosen is None else (chosen, named[chosen])
        return self._read(name, query, query.limit)

    async def prune_indexes(self, *, budget: int) -> int:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(
                f"a prune budget is a whole number of index members >= 1, got {budget!r}"
            )
        return 0


def _index_names(subscription: EventSubscription) -> list[_IndexName]:
    names: list[_IndexName] = [
        None,
        (SubscriptionIndex.TYPE, subscription.event_type),
        (SubscriptionIndex.FLOW, subscription.flow_id),
        (SubscriptionIndex.NODE, subscription.node_id),
    ]
    if subscription.correlation_id is not None:
        names.append((SubscriptionIndex.CORRELATION, subscription.correlation_id))
    return names
