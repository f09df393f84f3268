"""Event subscriptions on Redis: one JSON record each and four indexes (V1, V7).

Keys (all deployment-wide; a record carries its tenant, and listings filter by it):

- ``{ns}:sub:{<id>}`` the record (JSON);
- ``{ns}:subs:type:<event_type>``, ``{ns}:subs:corr:<correlation_id>``,
  ``{ns}:subs:flow:<flow_id>``, ``{ns}:subs:node:<node_id>`` the four indexes, and
  ``{ns}:subs:all`` for listings that name none of them: sorted sets of ids scored by
  ``created_at_ms``, so a listing reads them oldest first a page at a time;
- ``{ns}:subs:indexes`` the registry of index keys that exist, walked by the janitor.

Subscriptions have no TTL, so neither have their indexes. ``add`` and ``remove`` change the
record and every index entry in one script; an index member whose record vanished anyway
(evicted, deleted by hand) is pruned when a read meets it and by ``prune_indexes``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as redis

from plaita.adapters.redis.index_pruning import IndexPruner, in_every_index
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.domain.errors import SubscriptionWriteConflictError
from plaita.domain.events import (
    EventSubscription,
    SubscriptionIndex,
    SubscriptionQuery,
    choose_subscription_index,
)
from plaita.domain.janitor import listing_page_size

#: Attempts of an add or remove whose record keeps changing between its read and its write.
_WRITE_ATTEMPTS = 16


class RedisSubscriptionStore:
    """SubscriptionStore and IndexJanitor on the keys above."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._add = client.register_script(read_script("subscription_add"))
        self._remove = client.register_script(read_script("subscription_remove"))
        self._pruner = IndexPruner(
            client,
            registry=keys.subscription_indexes(),
            record_key=in_every_index(keys.subscription),
        )

    def _index_keys(self, subscription: EventSubscription) -> list[str]:
        keys = [
            self._keys.subscriptions_all(),
            self._keys.subscriptions_by_type(subscription.event_type),
            self._keys.subscriptions_by_flow(subscription.flow_id),
            self._keys.subscriptions_by_node(subscription.node_id),
        ]
        if subscription.correlation_id is not None:
            keys.append(self._keys.subscriptions_by_correlation(subscription.correlation_id))
        else:
            keys.append(self._keys.subscriptions_uncorrelated(subscription.event_type))
        return keys

    def _index_key(self, index: SubscriptionIndex | None, query: SubscriptionQuery) -> str:
        value = None if index is None else _field(index, query)
        if index is None or value is None:
            return self._keys.subscriptions_all()
        build = {
            SubscriptionIndex.CORRELATION: self._keys.subscriptions_by_correlation,
            SubscriptionIndex.NODE: self._keys.subscriptions_by_node,
            SubscriptionIndex.FLOW: self._keys.subscriptions_by_flow,
            SubscriptionIndex.TYPE: self._keys.subscriptions_by_type,
        }[index]
        return build(value)

    async def add(self, subscription: EventSubscription) -> None:
        record = _record(subscription)
        new_keys = self._index_keys(subscription)
        # Most adds are of a new id: expect no record, and learn the current one otherwise.
        expected = ""
        for _ in range(_WRITE_ATTEMPTS):
            old_keys = [] if not expected else self._index_keys(_parse(expected))
            written, current = await self._add(
                keys=[
                    self._keys.subscription(subscription.subscription_id),
                    self._keys.subscription_indexes(),
                    *new_keys,
                    *old_keys,
                ],
                args=[
                    expected,
                    record,
                    subscription.subscription_id,
                    subscription.created_at_ms,
                    len(new_keys),
                ],
            )
            if int(written) == 1:
                return
            expected = text(current)
        raise SubscriptionWriteConflictError(
            f"subscription {subscription.subscription_id!r} changed under {_WRITE_ATTEMPTS} "
            "attempts to store it; another process keeps rewriting it. Nothing was written: "
            "retry the step"
        )

    async def remove(self, subscription_id: str) -> bool:
        key = self._keys.subscription(subscription_id)
        current = await self._client.get(key)
        for _ in range(_WRITE_ATTEMPTS):
            if current is None:
                return False
            record = text(current)
            outcome, changed = await self._remove(
                keys=[key, self._keys.subscription_indexes(), *self._index_keys(_parse(record))],
                args=[record, subscription_id],
            )
            if int(outcome) >= 0:
                return int(outcome) == 1
            current = changed
        raise SubscriptionWriteConflictError(
            f"subscription {subscription_id!r} changed under {_WRITE_ATTEMPTS} attempts to "
            "remove it; another process keeps rewriting it. Nothing was removed: retry"
        )

    async def get(self, subscription_id: str) -> EventSubscription | None:
        record = await self._client.get(self._keys.subscription(subscription_id))
        return None if record is None else _parse(text(record))

    async def find(self, event_type: str) -> Sequence[EventSubscription]:
        index = self._keys.subscriptions_by_type(event_type)
        ids = [text(member) for member in await self._client.zrange(index, 0, -1)]
        found, _ = await self._candidates(index, ids)
        # An id still indexed under a type its record no longer has is skipped, not an error.
        return [s for s in found if s.event_type == event_type]

    async def find_for_event(
        self, event_type: str, correlation_id: str | None
    ) -> Sequence[EventSubscription]:
        """The correlation's subscriptions and the type's uncorrelated ones: 2 round trips,
        however many subscriptions the type has (an index read, one MGET)."""
        indexes = [self._keys.subscriptions_uncorrelated(event_type)]
        if correlation_id is not None:
            indexes.append(self._keys.subscriptions_by_correlation(correlation_id))
        async with self._client.pipeline(transaction=False) as pipe:
            for index in indexes:
                pipe.zrange(index, 0, -1)
            replies = await pipe.execute()
        found: list[EventSubscription] = []
        for index, members in zip(indexes, replies, strict=True):
            candidates, _ = await self._candidates(index, [text(m) for m in members])
            found.extend(candidates)
        matching = [s for s in found if s.event_type == event_type]
        return _oldest_first(matching)

    async def _choose(self, query: SubscriptionQuery) -> SubscriptionIndex | None:
        """The index to read: the smallest the query names, measured in one round trip."""
        named = [index for index in SubscriptionIndex if _field(index, query) is not None]
        if len(named) < 2:
            return choose_subscription_index(query)
        async with self._client.pipeline(transaction=False) as pipe:
            for index in named:
                pipe.zcard(self._index_key(index, query))
            sizes = await pipe.execute()
        return choose_subscription_index(
            query, {index: int(size) for index, size in zip(named, sizes, strict=True)}
        )

    async def _candidates(
        self, index: str, ids: Sequence[str]
    ) -> tuple[list[EventSubscription], int]:
        """The records of ``ids`` in one MGET, in index order, and how many dead ids were
        pruned from ``index``."""
        if not ids:
            return [], 0
        records = await self._client.mget([self._keys.subscription(i) for i in ids])
        dead = [i for i, record in zip(ids, records, strict=True) if record is None]
        pruned = await self._pruner.prune(index, dead) if dead else 0
        return [_parse(text(record)) for record in records if record is not None], pruned

    # `list` and what follows come last: below it, `list` in an annotation names this method.
    async def list(self, query: SubscriptionQuery) -> Sequence[EventSubscription]:
        index = await self._choose(query)
        key = self._index_key(index, query)
        page = listing_page_size(query.limit, exact=_decided_by(index, query))
        found: list[EventSubscription] = []
        offset = 0
        while len(found) < query.limit:
            ids = [
                text(member) for member in await self._client.zrange(key, offset, offset + page - 1)
            ]
            candidates, pruned = await self._candidates(key, ids)
            found.extend(s for s in candidates if query.matches(s))
            if len(ids) < page:
                break
            # The members pruned from this page stood before the next unread one.
            offset += len(ids) - pruned
        return _oldest_first(found)[: query.limit]

    async def prune_indexes(self, *, budget: int) -> int:
        return await self._pruner.sweep(budget=budget)


def _field(index: SubscriptionIndex, query: SubscriptionQuery) -> str | None:
    return {
        SubscriptionIndex.CORRELATION: query.correlation_id,
        SubscriptionIndex.NODE: query.node_id,
        SubscriptionIndex.FLOW: query.flow_id,
        SubscriptionIndex.TYPE: query.event_type,
    }[index]


def _decided_by(index: SubscriptionIndex | None, query: SubscriptionQuery) -> bool:
    """Whether every live member of the chosen index matches the query: it names no other
    field, so each candidate is a result and a page of ``limit`` members is enough."""
    others = [_field(other, query) for other in SubscriptionIndex if other is not index]
    return query.tenant_id is None and all(value is None for value in others)


def _oldest_first(found: Sequence[EventSubscription]) -> list[EventSubscription]:
    unique = {s.subscription_id: s for s in found}
    return sorted(unique.values(), key=lambda s: (s.created_at_ms, s.subscription_id))


def _record(subscription: EventSubscription) -> str:
    return json.dumps(subscription.to_json(), separators=(",", ":"))


def _parse(record: str) -> EventSubscription:
    return EventSubscription.from_json(json.loads(record))
