"""In-memory twin of the Redis task queue (W1, W2), with its three priority streams."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import attrs

from plaita.adapters.memory.streams import Delivered, MemoryGroupStream
from plaita.application.codec import (
    RawFields,
    carrier_priority,
    decode_dead_letter,
    decode_delivery,
    encode_dead_letter,
    encode_envelope,
    envelope_document,
)
from plaita.application.ports import Clock, DeadLetter, Delivery, QueueStats
from plaita.domain.config_generations import DEFAULT_DLQ_MAX_LEN, check_dlq_max_len
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.priorities import (
    PRIORITIES,
    Priority,
    priority_id,
    split_priority_id,
    take_in_priority_order,
)

#: A delivered entry of one level, its id as the stream gave it.
_Read = tuple[Priority, Delivered[str | bytes]]


@attrs.define
class _ReadAhead:
    """What a consumer read and has not taken yet (pending on it), and whose turn is next."""

    entries: dict[Priority, list[Delivered[str | bytes]]] = attrs.field(
        factory=lambda: {level: [] for level in PRIORITIES}
    )
    turn: int = 0

    def __bool__(self) -> bool:
        return any(self.entries.values())


class MemoryTaskQueue:
    """TaskQueue in memory; entries are stored encoded, exactly as on the Redis streams.

    A read takes from the high, normal and low streams as the Redis adapter does: what each
    level has ready (read ahead, then read from the streams short of ``count``) goes through
    the domain's share; message ids name their level (``priority_id``).
    """

    def __init__(self, clock: Clock, *, dead_letter_max_len: int = DEFAULT_DLQ_MAX_LEN) -> None:
        self._arrived = asyncio.Condition()
        self._streams: dict[Priority, MemoryGroupStream[str | bytes]] = {
            level: MemoryGroupStream(clock, arrived=self._arrived) for level in PRIORITIES
        }
        self._dead_letters: MemoryGroupStream[str] = MemoryGroupStream(clock)
        self._dead_letter_max_len = check_dlq_max_len(dead_letter_max_len)
        self._dropped = 0
        self._read_ahead: dict[str, _ReadAhead] = {}

    async def ensure_group(self) -> None:
        """The in-memory streams always have their one consumer group."""

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        return await self._add(envelope.priority, encode_envelope(envelope))

    async def enqueue_raw(self, fields: RawFields) -> str:
        """Append fields as they are, bypassing the codec (to test malformed entries); on the
        stream of the priority they name, if it is one, else the normal one."""
        text = {str(name): value for name, value in fields.items() if isinstance(value, str)}
        return await self._add(carrier_priority(envelope_document(text) or {}), fields)

    async def _add(self, priority: Priority, fields: RawFields) -> str:
        stream_id = await self._streams[priority].add(dict(fields.items()))
        return priority_id(stream_id, priority)

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        ahead = self._read_ahead.setdefault(consumer, _ReadAhead())
        self._read_new(ahead, consumer, count)
        if not ahead and block_ms > 0:
            await self._wait_for_new(block_ms)
            self._read_new(ahead, consumer, count)
        decision = take_in_priority_order(
            count, {level: len(entries) for level, entries in ahead.entries.items()}, ahead.turn
        )
        ahead.turn = decision.next_turn
        taken: list[_Read] = []
        for level in PRIORITIES:
            wanted = decision.taken[level]
            taken += [(level, entry) for entry in ahead.entries[level][:wanted]]
            del ahead.entries[level][:wanted]
        return [
            decode_delivery(priority_id(message_id, level), fields, delivery_count)
            for level, (message_id, fields, delivery_count) in taken
        ]

    def _read_new(self, ahead: _ReadAhead, consumer: str, count: int) -> None:
        for level, stream in self._streams.items():
            short = count - len(ahead.entries[level])
            if short > 0:
                ahead.entries[level] += stream.deliver_new(consumer, short)

    async def _wait_for_new(self, block_ms: int) -> None:
        async with self._arrived:
            try:
                await asyncio.wait_for(
                    self._arrived.wait_for(
                        lambda: any(stream.has_new() for stream in self._streams.values())
                    ),
                    block_ms / 1000,
                )
            except TimeoutError:
                return

    async def ack(self, message_id: str) -> None:
        where = split_priority_id(message_id)
        if where is not None:
            self._streams[where[0]].ack(where[1])

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        deliveries: list[Delivery] = []
        for level, stream in self._streams.items():
            claimed = stream.claim_idle(
                consumer, min_idle_ms=min_idle_ms, count=count - len(deliveries)
            )
            self._forget(level, {message_id for message_id, _fields, _count in claimed})
            deliveries += [
                decode_delivery(priority_id(message_id, level), fields, times, reclaimed=True)
                for message_id, fields, times in claimed
            ]
        return deliveries

    def _forget(self, level: Priority, claimed: set[str]) -> None:
        """Drop read-ahead entries a reclaim just took (so none is dispatched twice)."""
        for ahead in self._read_ahead.values():
            ahead.entries[level] = [e for e in ahead.entries[level] if e[0] not in claimed]

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        by_level: dict[Priority, list[str]] = {}
        for message_id in message_ids:
            where = split_priority_id(message_id)
            if where is not None:
                by_level.setdefault(where[0], []).append(where[1])
        return sum(self._streams[level].touch(consumer, ids) for level, ids in by_level.items())

    async def stats(self) -> QueueStats:
        unread = [stream.oldest_unread_ms() for stream in self._streams.values()]
        return QueueStats(
            length=sum(stream.length for stream in self._streams.values()),
            pending=sum(stream.pending for stream in self._streams.values()),
            oldest_unread_ms=min((ms for ms in unread if ms is not None), default=None),
        )

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        dlq_id = await self._dead_letters.add(encode_dead_letter(delivery, reason))
        self._dropped += self._dead_letters.trim_to(self._dead_letter_max_len)
        await self.ack(delivery.message_id)
        return dlq_id

    async def dead_letters_dropped(self) -> int:
        return self._dropped

    async def dead_letter_length(self) -> int:
        return self._dead_letters.length

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        return [decode_dead_letter(*entry) for entry in self._dead_letters.newest(count)]

    async def trim_acknowledged(self) -> int:
        return sum(stream.trim_acknowledged(min_age_ms=0) for stream in self._streams.values())

    async def close(self) -> None:
        """Nothing to release: the twin has no open reads (the Redis queue's partitions do)."""
