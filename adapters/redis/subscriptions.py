"""Event subscriptions on Redis: one JSON record each and four indexes (V1, V7).

Keys (all deployment-wide; a record carries its tenant, and listings filter by it):

- ``{ns}:sub:{<id>}`` the record (JSON);
- ``{ns}:subs:type:<event_type>``, ``{ns}:subs:corr:<correlation_id>``,
  ``{ns}:subs:flow:<flow_id>``, ``{ns}:subs:node:<node_id>`` the four indexes, and
  ``{ns}:subs:all`` for listings that name none of them: sorted sets of ids scored by
  ``created_at_ms``, so a listing reads them oldest first a page at a time;
- ``{ns}:subs:indexes`` the registry of index keys that exist, walked by the janitor.

Subscriptions have no TTL, so neither have their indexes. A record and its index entries live
in different hash slots (Redis Cluster), so a write is two steps, the record first:

1. ``add`` swaps the record in with ``SET … GET``, which answers the record it replaced;
   ``remove`` takes it out with ``GETDEL``, which answers the record it deleted;
2. one pipeline then changes the index entries: the id leaves the indexes of the replaced
   or deleted record that the new one does not share, joins the new record's indexes, whose
   keys join the registry; and the record is read back last.

A crash between the steps loses nothing. After an ``add`` the record is stored, and the
caller, who got an error, adds it again: the swap answers the same record and the entries
are written (entries of the record before it that the new one does not share stay behind,
stale: see below). After a ``remove`` the index entries name a record that is gone: every
reader skips such a member, and the first listing or janitor pass that meets it prunes it
(``index_pruning``), as it prunes a member whose record was evicted or deleted by hand. The
entries a reader must never lack are the live record's, and step 2 writes them after the
record exists, so a prune that races with it puts back what it took.

Two writers of one id may interleave their steps, and one's removals undo the other's
entries: step 2 reads the record back after its index changes, and when the record is not
the one this write left, it writes the entries of the record as it is now (and removes
nothing). On a single node the pipeline runs in order, so an entry can be stale (its record
moved to other indexes) but never missing. On a cluster the read-back goes to the record's
node while the removals go to the indexes' nodes at the same time: an entry goes missing
only if the other writer's swap and its index entries both land between the two. Every
reader checks a candidate against the index it came from, so a stale entry is skipped; it
is pruned once its record is removed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.index_pruning import IndexPruner, in_every_index
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text
from plaita.domain.events import (
    EventSubscription,
    SubscriptionIndex,
    SubscriptionQuery,
    choose_subscription_index,
)
from plaita.domain.janitor import listing_page_size


class RedisSubscriptionStore:
    """SubscriptionStore and IndexJanitor on the keys above."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
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
        """Two round trips on a single node: the record, then its index entries."""
        subscription_id = subscription.subscription_id
        key = self._keys.subscription(subscription_id)
        record = _record(subscription)
        previous = await self._client.set(key, record, get=True)
        new_keys = self._index_keys(subscription)
        old_keys = [] if previous is None else self._index_keys(_parse(text(previous)))
        await self._reindex(
            subscription_id,
            leave=[index for index in old_keys if index not in new_keys],
            join=subscription,
            written=record,
        )

    async def remove(self, subscription_id: str) -> bool:
        """Two round trips on a single node: the record, then its index entries."""
        previous = await self._client.getdel(self._keys.subscription(subscription_id))
        if previous is None:
            return False
        await self._reindex(
            subscription_id,
            leave=self._index_keys(_parse(text(previous))),
            join=None,
            written=None,
        )
        return True

    async def _reindex(
        self,
        subscription_id: str,
        *,
        leave: Sequence[str],
        join: EventSubscription | None,
        written: str | None,
    ) -> None:
        """Step 2 of a write: the id leaves ``leave`` and joins ``join``'s indexes, in one
        pipeline that reads the record back last (``written``: the record step 1 left)."""
        key = self._keys.subscription(subscription_id)
        async with self._client.pipeline(transaction=False) as pipe:
            for index in leave:
                pipe.zrem(index, subscription_id)
            if join is not None:
                self._queue_entries(pipe, join)
            pipe.get(key)
            replies = await pipe.execute()
        current = replies[-1]
        if current is not None and text(current) != written:
            # Another add of this id ran between this write's two steps, and one's index
            # changes may have undone the other's: give the record as it is now its entries.
            # Nothing is removed here, so no entry it needs can go missing.
            async with self._client.pipeline(transaction=False) as pipe:
                self._queue_entries(pipe, _parse(text(current)))
                await pipe.execute()

    def _queue_entries(self, pipe: Any, subscription: EventSubscription) -> None:
        """The subscription's index entries, then its index keys into the registry (the
        janitor takes a vanished index off it, and looks again: index_pruning)."""
        keys = self._index_keys(subscription)
        for index in keys:
            pipe.zadd(index, {subscription.subscription_id: subscription.created_at_ms})
        pipe.sadd(self._keys.subscription_indexes(), *keys)

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
        """The correlation's subscriptions and the type's uncorrelated ones: 2 round trips on
        a single node, however many subscriptions the type has (the index reads, then the
        candidates' records, each in one pipeline)."""
        indexes = [self._keys.subscriptions_uncorrelated(event_type)]
        if correlation_id is not None:
            indexes.append(self._keys.subscriptions_by_correlation(correlation_id))
        async with self._client.pipeline(transaction=False) as pipe:
            for index in indexes:
                pipe.zrange(index, 0, -1)
            replies = await pipe.execute()
        members = [[text(member) for member in reply] for reply in replies]
        records = await self._records([i for group in members for i in group])
        found: list[EventSubscription] = []
        at = 0
        for index, group in zip(indexes, members, strict=True):
            alive, _ = await self._alive(index, group, records[at : at + len(group)])
            found.extend(alive)
            at += len(group)
        # A stale entry (its record moved on, see the module's docstring) is skipped.
        matching = [
            s
            for s in found
            if s.event_type == event_type and s.correlation_id in (None, correlation_id)
        ]
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
        """The records of ``ids`` in index order, and how many dead ids were pruned from
        ``index``."""
        return await self._alive(index, ids, await self._records(ids))

    async def _records(self, ids: Sequence[str]) -> list[Any]:
        """The records of ``ids`` in order, None where gone: one pipeline of GETs (one round
        trip on a single node, one per node on a cluster, where an MGET across hash slots is
        refused)."""
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for subscription_id in ids:
                pipe.get(self._keys.subscription(subscription_id))
            return list(await pipe.execute())

    async def _alive(
        self, index: str, ids: Sequence[str], records: Sequence[Any]
    ) -> tuple[list[EventSubscription], int]:
        """The subscriptions of ``records`` (read for ``ids`` of ``index``); the ids without
        a record are pruned from ``index``, and how many were is the second value."""
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
