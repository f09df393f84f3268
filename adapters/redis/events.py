"""The event log on Redis: records with a TTL, two indexes and a notification stream (V1, V7).

Keys (deployment-wide; a record carries its tenant, and listings filter by it):

- ``{ns}:ev:{<id>}`` the record (JSON), expiring ``ttl_seconds`` (7 days) after its append;
- ``{ns}:evidx:type:<type>`` and ``{ns}:evidx:time`` sorted sets of ids scored by
  ``timestamp_ms``: one per type, one across all types. Each append extends their TTL to
  ``ttl_seconds`` from now and never shortens it, so an index outlives every record in it;
- ``{ns}:evidx:keys`` the registry of index keys that exist, walked by the janitor;
- ``{ns}:events:stream`` the notification stream the event filters read (ADR 0002),
  trimmed below what every group still needs (``trim_notifications``, S5). With P > 1
  partitions (``--partitions``, as the task queue) it is P streams
  ``{ns}:events:{events:p<k>}:stream``, each its own hash tag; an event's notification goes to
  partition ``partition_of(event_id, P)``. A notification id names its partition as a task
  queue's message id does (``plaita.domain.partitions.qualified_id``), so ack and reclaim
  find the stream from the id alone; a filter holds one blocking XREADGROUP per partition
  (``PartitionedReads``, the task queue's reader).

An index member outlives its record by up to 7 days; listings skip and prune the dead ones
they meet, and ``prune_indexes`` walks the indexes a bounded budget at a time.

These keys lie in different hash slots of a Redis Cluster (a record's hash tag is its event
id), so no MULTI or MGET spans them. An append is two steps, in this order:

1. one non-transactional pipeline: the record with its TTL, its two index entries, the
   registry and the index TTLs — one round trip on a single node, which runs them in order,
   record first; on a cluster one per node, side by side, landing in any order;
2. once step 1 succeeded, and only then, the notification on the stream.

A crash inside or between the steps loses nothing: the publisher got an error and may
publish again with the same event id, which rewrites the same record and index members and
notifies (a second notification of one event is harmless: filtering is idempotent in effect
and handled marks keep a handler from running twice). Until then an index member without
its record is skipped by listings and pruned; a record without index entries is listed by
no one and expires with its TTL; a record indexed but not notified is found by the
reconciler's re-scan of the time index (V5). No notification is ever written before its
record, so an event filter never reads one naming an event not stored yet.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as redis

from plaita.adapters.redis.index_pruning import IndexPruner, in_every_index
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue_partitions import PartitionedReads
from plaita.adapters.redis.stream_trim import StreamTrimmer
from plaita.adapters.redis.streams import RawStreamEntry, RedisGroupStream, text, text_fields
from plaita.application.ports import EventNotification
from plaita.domain.events import Event, EventQuery
from plaita.domain.janitor import listing_page_size
from plaita.domain.partitions import (
    DEFAULT_PARTITIONS,
    check_partitions,
    partition_of,
    qualified_id,
    split_id,
)

EVENT_FILTER_GROUP = "plaita-event-filter"
EVENT_TTL_SECONDS = 7 * 24 * 60 * 60
_EVENT_ID_FIELD = "event_id"


class RedisEventLog:
    """EventLog and IndexJanitor on the keys above.

    ``ttl_seconds`` may be fractional (tests age records in a second); Redis keeps it to the ms.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        *,
        group: str = EVENT_FILTER_GROUP,
        ttl_seconds: float = EVENT_TTL_SECONDS,
        partitions: int = DEFAULT_PARTITIONS,
    ) -> None:
        ttl_ms = int(ttl_seconds * 1000)
        if ttl_ms < 1:
            raise ValueError(f"an event ttl must be at least 1 ms, got ttl_seconds={ttl_seconds!r}")
        self._client = client
        self._keys = keys
        self._ttl_ms = ttl_ms
        self._partitions = check_partitions(partitions)
        layout: list[int | None] = [None] if partitions == 1 else list(range(partitions))
        self._streams = [
            RedisGroupStream(client, keys.event_notifications(k), group) for k in layout
        ]
        self._trimmers = [StreamTrimmer(client, stream.stream) for stream in self._streams]
        self._reads = PartitionedReads(self._streams)
        self._pruner = IndexPruner(
            client, registry=keys.event_indexes(), record_key=in_every_index(keys.event)
        )
        # Per consumer and partition: the last pending id handed out, until its backlog is
        # drained.
        self._backlog: dict[tuple[str, int], str] = {}
        self._caught_up: set[tuple[str, int]] = set()

    @property
    def partitions(self) -> int:
        return self._partitions

    async def append(self, event: Event) -> None:
        record = json.dumps(event.to_json(), separators=(",", ":"))
        by_type = self._keys.events_by_type(event.event_type)
        by_time = self._keys.events_by_time()
        registry = self._keys.event_indexes()
        # Step 1 (see the module's docstring): keys of four slots, so not one MULTI.
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.set(self._keys.event(event.event_id), record, px=self._ttl_ms)
            pipe.zadd(by_type, {event.event_id: event.timestamp_ms})
            pipe.zadd(by_time, {event.event_id: event.timestamp_ms})
            pipe.sadd(registry, by_type, by_time)
            for key in (by_type, by_time, registry):
                # TTLs only extend: NX gives a key without one its first, GT lengthens an
                # existing one and never shortens it (Redis >= 7.0).
                pipe.pexpire(key, self._ttl_ms, nx=True)
                pipe.pexpire(key, self._ttl_ms, gt=True)
            # Raises the first failed command's error: then no notification is written.
            await pipe.execute()
        # Step 2: the notification, after the record is stored, on the event's partition.
        partition = partition_of(event.event_id, self._partitions)
        await self._streams[partition].add({_EVENT_ID_FIELD: event.event_id})

    async def get(self, event_id: str) -> Event | None:
        record = await self._client.get(self._keys.event(event_id))
        return None if record is None else Event.from_json(json.loads(record))

    async def _candidates(self, index: str, ids: Sequence[str]) -> tuple[list[Event], int]:
        """The records of ``ids`` in index order, and how many dead ids (expired records) were
        pruned from ``index``.

        One pipeline of GETs: one round trip on a single node, one per node on a cluster,
        where the records lie in as many slots as there are ids and a MGET is refused.
        """
        if not ids:
            return [], 0
        async with self._client.pipeline(transaction=False) as pipe:
            for event_id in ids:
                pipe.get(self._keys.event(event_id))
            records = await pipe.execute()
        dead = [i for i, record in zip(ids, records, strict=True) if record is None]
        pruned = await self._pruner.prune(index, dead) if dead else 0
        return [
            Event.from_json(json.loads(record)) for record in records if record is not None
        ], pruned

    async def ensure_group(self) -> None:
        for stream in self._streams:
            await stream.ensure_group()

    async def read_notifications(
        self, consumer: str, *, count: int, block_ms: int
    ) -> list[EventNotification]:
        """The consumer's own pending notifications first (a restarted filter's backlog),
        partition after partition, then new ones of every partition."""
        for partition, stream in enumerate(self._streams):
            where = (consumer, partition)
            if where in self._caught_up:
                continue
            start = self._backlog.get(where, "0")
            entries = await stream.read(consumer, start=start, count=count, block_ms=0)
            if entries:
                self._backlog[where] = entries[-1][0]
                return self._notifications(partition, entries)
            self._caught_up.add(where)
        if self._partitions == 1:
            entries = await self._streams[0].read(
                consumer, start=">", count=count, block_ms=block_ms
            )
            return self._notifications(0, entries)
        read = await self._reads.read(consumer, count=count, block_ms=block_ms)
        return [
            notification
            for partition, entry in read
            for notification in self._notifications(partition, [entry])
        ]

    async def ack_notification(self, notification_id: str) -> None:
        where = split_id(notification_id, self._partitions)
        if where is not None:  # not one of this stream's ids: nothing of it is pending
            await self._streams[where[0]].ack(where[1])

    async def reclaim_notifications(
        self, consumer: str, *, min_idle_ms: int, count: int
    ) -> list[EventNotification]:
        reclaimed: list[EventNotification] = []
        taken: list[tuple[int, str]] = []
        for partition, stream in enumerate(self._streams):
            if len(reclaimed) >= count:
                break
            entries = await stream.claim_idle(
                consumer, min_idle_ms=min_idle_ms, count=count - len(reclaimed)
            )
            taken.extend((partition, message_id) for message_id, _ in entries)
            reclaimed.extend(self._notifications(partition, entries))
        if taken and self._partitions > 1:
            self._reads.forget(taken)  # a buffered copy must not be handed out again
        return reclaimed

    async def trim_notifications(self, *, min_age_ms: int) -> int:
        """Trim every partition (each below what its groups still need, S5)."""
        trimmed = 0
        for trimmer in self._trimmers:
            trimmed += await trimmer.trim(min_age_ms=min_age_ms)
        return trimmed

    async def close(self) -> None:
        """Cancel the blocking reads still open on the partitions (P > 1); what they had
        read stays pending on the consumer, for reclaim."""
        await self._reads.close()

    def _notifications(
        self, partition: int, entries: list[RawStreamEntry]
    ) -> list[EventNotification]:
        # Each entry decoded on its own. One that names no readable event (deleted from the
        # stream, or written by someone else) is handed on all the same: its lookup finds no
        # event and it is acked, instead of staying pending for ever.
        return [
            EventNotification(
                notification_id=qualified_id(message_id, partition, self._partitions),
                event_id=text_fields(fields).get(_EVENT_ID_FIELD, ""),
            )
            for message_id, fields in entries
        ]

    # `list` and what follows come last: below it, `list` in an annotation names this method.
    async def list(self, query: EventQuery) -> Sequence[Event]:
        key = (
            self._keys.events_by_time()
            if query.event_type is None
            else self._keys.events_by_type(query.event_type)
        )
        low = "-inf" if query.since_ms is None else str(query.since_ms)
        high = "+inf" if query.until_ms is None else f"({query.until_ms}"
        # The index decides type and window; only a correlation or tenant filter drops
        # candidates.
        exact = query.correlation_id is None and query.tenant_id is None
        page = listing_page_size(query.limit, exact=exact)
        found: list[Event] = []
        offset = 0
        while len(found) < query.limit:
            ids = [
                text(member)
                for member in await self._client.zrange(
                    key, low, high, byscore=True, offset=offset, num=page
                )
            ]
            candidates, pruned = await self._candidates(key, ids)
            found.extend(event for event in candidates if query.matches(event))
            if len(ids) < page:
                break
            # The members pruned from this page stood before the next unread one.
            offset += len(ids) - pruned
        unique = {event.event_id: event for event in found}
        return sorted(unique.values(), key=lambda e: (e.timestamp_ms, e.event_id))[: query.limit]

    async def prune_indexes(self, *, budget: int) -> int:
        return await self._pruner.sweep(budget=budget)
