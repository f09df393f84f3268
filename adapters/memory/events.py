"""In-memory twin of the Redis event log: records with a TTL, the type and time indexes and a
notification stream (V1, V7).

Time is the Clock's wall time. As on Redis, an index member outlives its expired record until
a listing meets it or ``prune_indexes`` walks past it, and an index itself expires
``ttl_ms`` after the last append to it (its TTL only extends), taking its members along.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from plaita.adapters.memory.streams import Delivered, MemoryGroupStream
from plaita.application.ports import Clock, EventNotification
from plaita.domain.events import Event, EventQuery
from plaita.domain.janitor import PRUNE_BATCH, listing_page_size
from plaita.domain.retention import check_trim_age_ms

EVENT_TTL_MS = 7 * 24 * 60 * 60 * 1000
_EVENT_ID_FIELD = "event_id"
#: The index across all types; a type's index is named by the type.
_TIME_INDEX: tuple[str, ...] = ("time",)


@attrs.define
class _Index:
    """A sorted set of event ids by timestamp_ms, with its expiry."""

    members: dict[str, int]
    expires_at_ms: int


class MemoryEventLog:
    """EventLog and IndexJanitor in memory; records expire ``ttl_ms`` after their append."""

    def __init__(self, clock: Clock, *, ttl_ms: int = EVENT_TTL_MS) -> None:
        if ttl_ms < 1:
            raise ValueError(f"an event ttl must be at least 1 ms, got ttl_ms={ttl_ms!r}")
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._records: dict[str, tuple[str, int]] = {}
        self._indexes: dict[tuple[str, ...], _Index] = {}
        self._stream: MemoryGroupStream[str] = MemoryGroupStream(clock)
        # Per consumer: the last pending id handed out, until its backlog is drained.
        self._backlog: dict[str, str] = {}
        self._caught_up: set[str] = set()
        # Where the janitor stands: indexes still to visit, the one walked, the rank reached.
        self._pending: list[tuple[str, ...]] = []
        self._current: tuple[str, ...] | None = None
        self._offset = 0

    def restarted(self) -> MemoryEventLog:
        """The same records and stream as a restarted process sees them: no read positions."""
        twin = MemoryEventLog(self._clock, ttl_ms=self._ttl_ms)
        twin._records = self._records
        twin._indexes = self._indexes
        twin._stream = self._stream
        return twin

    async def append(self, event: Event) -> None:
        record = json.dumps(event.to_json(), separators=(",", ":"))
        now = self._clock.now_ms()
        self._records[event.event_id] = (record, now + self._ttl_ms)
        for name in (("type", event.event_type), _TIME_INDEX):
            index = self._live_index(name)
            if index is None:
                index = self._indexes[name] = _Index({}, now + self._ttl_ms)
            index.members[event.event_id] = event.timestamp_ms
            index.expires_at_ms = max(index.expires_at_ms, now + self._ttl_ms)
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

    def _live_index(self, name: tuple[str, ...]) -> _Index | None:
        index = self._indexes.get(name)
        if index is not None and self._clock.now_ms() >= index.expires_at_ms:
            del self._indexes[name]
            return None
        return index

    def _prune_member(self, name: tuple[str, ...], event_id: str) -> None:
        index = self._indexes.get(name)
        if index is None:
            return
        index.members.pop(event_id, None)
        if not index.members:
            del self._indexes[name]

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

    # `list` and what follows come last: below it, `list` in an annotation names this method.
    async def trim_notifications(self, *, min_age_ms: int) -> int:
        return self._stream.trim_acknowledged(min_age_ms=check_trim_age_ms(min_age_ms))

    async def list(self, query: EventQuery) -> Sequence[Event]:
        name = _TIME_INDEX if query.event_type is None else ("type", query.event_type)
        index = self._live_index(name)
        if index is None:
            return []
        window = [
            event_id
            for event_id in _ordered(index)
            if (query.since_ms is None or index.members[event_id] >= query.since_ms)
            and (query.until_ms is None or index.members[event_id] < query.until_ms)
        ]
        exact = query.correlation_id is None and query.tenant_id is None
        page = listing_page_size(query.limit, exact=exact)
        found: list[Event] = []
        for start in range(0, len(window), page):
            if len(found) >= query.limit:
                break
            for event_id in window[start : start + page]:
                event = await self.get(event_id)
                if event is None:
                    self._prune_member(name, event_id)
                elif query.matches(event):
                    found.append(event)
        return sorted(found, key=lambda e: (e.timestamp_ms, e.event_id))[: query.limit]

    async def prune_indexes(self, *, budget: int) -> int:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(
                f"a prune budget is a whole number of index members >= 1, got {budget!r}"
            )
        examined = removed = 0
        began_pass = False
        while examined < budget:
            if self._current is None:
                if not self._pending:
                    if began_pass:
                        break
                    began_pass = True
                    self._pending = [n for n in [*self._indexes] if self._live_index(n)]
                    continue
                self._current, self._offset = self._pending.pop(0), 0
            name = self._current
            index = self._live_index(name)
            want = min(PRUNE_BATCH, budget - examined)
            batch = [] if index is None else _ordered(index)[self._offset : self._offset + want]
            if not batch:
                self._current = None
                continue
            dead = [event_id for event_id in batch if await self.get(event_id) is None]
            for event_id in dead:
                self._prune_member(name, event_id)
            examined += len(batch)
            removed += len(dead)
            self._offset += len(batch) - len(dead)
            if len(batch) < want:
                self._current = None
        return removed


def _ordered(index: _Index) -> list[str]:
    return sorted(index.members, key=lambda event_id: (index.members[event_id], event_id))


def _notifications(delivered: list[Delivered[str]]) -> list[EventNotification]:
    return [
        EventNotification(notification_id=message_id, event_id=fields[_EVENT_ID_FIELD])
        for message_id, fields, _count in delivered
    ]
