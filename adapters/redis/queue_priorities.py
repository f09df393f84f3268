"""One queue partition's three priority streams, read with one XREADGROUP, and the buffer a
consumer takes from in priority order (``plaita.domain.priorities``).

``XREADGROUP … COUNT n STREAMS high normal low > > >`` returns up to n entries of each
stream in one round trip (and blocks, when asked, until any of them has one). The read
takes what the domain's share says and keeps the rest in the consumer's buffer: those are
pending on this consumer already, as any carrier being dispatched, and are taken by the
next reads. The message ids of high and low entries carry their level
(``priority_id``), so ack, touch, reclaim and dead-letter find the stream from the id.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import redis.asyncio as redis

from plaita.adapters.redis.streams import RawStreamEntry, RedisGroupStream, text, undecoded
from plaita.domain.priorities import (
    PRIORITIES,
    Priority,
    priority_id,
    split_priority_id,
    take_in_priority_order,
)

#: An entry of partition ``k`` with its id naming its level: (k, entry).
PartitionEntry = tuple[int, RawStreamEntry]


class PriorityStreams:
    """The high, normal and low streams of one partition, sharing its hash tag and group."""

    def __init__(self, client: redis.Redis, streams: Mapping[Priority, str], group: str) -> None:
        self._client = client
        self.group = group
        self.by_level = {
            level: RedisGroupStream(client, streams[level], group) for level in PRIORITIES
        }

    @property
    def all(self) -> list[RedisGroupStream]:
        return list(self.by_level.values())

    async def ensure_group(self) -> None:
        for stream in self.all:
            await stream.ensure_group()

    async def read(
        self,
        consumer: str,
        *,
        start: str = ">",
        count: int,
        block_ms: int,
        levels: Sequence[Priority] = PRIORITIES,
    ) -> list[RawStreamEntry]:
        """New entries of ``levels`` (one XREADGROUP), ids naming their level, highest first."""
        names = [self.by_level[level].stream for level in levels]
        command: list[Any] = ["XREADGROUP", "GROUP", self.group, consumer, "COUNT", count]
        if block_ms > 0:
            command += ["BLOCK", block_ms]  # BLOCK 0 would mean "forever"
        reply = await undecoded(self._client, *command, "STREAMS", *names, *([start] * len(names)))
        by_stream = _entries_by_stream(reply)
        return [
            (priority_id(message_id, level), fields)
            for level, name in zip(levels, names, strict=True)
            for message_id, fields in by_stream.get(name, [])
        ]


def _entries_by_stream(reply: Any) -> dict[str, list[RawStreamEntry]]:
    """The entries of a multi-stream XREADGROUP reply per stream (a deleted entry: empty)."""
    # RESP2: [[stream, [(id, fields), ...]], ...]; RESP3: {stream: [[(id, fields), ...]]}.
    if not reply:
        return {}
    if isinstance(reply, Mapping):
        pairs = [(name, entries) for name, value in reply.items() for entries in value]
    else:
        pairs = [(name, entries) for name, entries in reply]
    found: dict[str, list[RawStreamEntry]] = {}
    for name, entries in pairs:
        found.setdefault(text(name), []).extend(
            (text(message_id), dict(fields or {}))
            for message_id, fields in entries or []
            if message_id is not None
        )
    return found


def level_of(entry: PartitionEntry) -> Priority:
    where = split_priority_id(entry[1][0])
    return Priority.NORMAL if where is None else where[0]


@attrs.define
class PriorityBuffer:
    """What a consumer has read and not yet taken, and whose turn the next carrier is."""

    entries: collections.deque[PartitionEntry] = attrs.field(factory=collections.deque)
    turn: int = 0

    def __bool__(self) -> bool:
        return bool(self.entries)

    def extend(self, partition: int, entries: Iterable[RawStreamEntry]) -> None:
        self.entries.extend((partition, entry) for entry in entries)

    def ready(self) -> dict[Priority, int]:
        counts = dict.fromkeys(PRIORITIES, 0)
        for entry in self.entries:
            counts[level_of(entry)] += 1
        return counts

    def short_levels(self, count: int) -> list[Priority]:
        """The levels with fewer than ``count`` buffered: what a read should ask Redis for."""
        ready = self.ready()
        return [level for level in PRIORITIES if ready[level] < count]

    def take(self, count: int) -> list[PartitionEntry]:
        """Up to ``count`` entries, as many of each level as the domain's share says (each
        level's oldest first), highest level first; the rest stay, in their order."""
        decision = take_in_priority_order(count, self.ready(), self.turn)
        self.turn = decision.next_turn
        wanted = dict(decision.taken)
        taken: dict[Priority, list[PartitionEntry]] = {level: [] for level in PRIORITIES}
        kept: collections.deque[PartitionEntry] = collections.deque()
        for entry in self.entries:
            level = level_of(entry)
            if wanted[level]:
                wanted[level] -= 1
                taken[level].append(entry)
            else:
                kept.append(entry)
        self.entries = kept
        return [entry for level in PRIORITIES for entry in taken[level]]

    def forget(self, entries: Iterable[tuple[int, str]]) -> None:
        """Drop entries a reclaim just took (so no carrier is dispatched twice)."""
        gone = set(entries)
        if gone and self.entries:
            self.entries = collections.deque(
                (partition, entry)
                for partition, entry in self.entries
                if (partition, entry[0]) not in gone
            )
