"""In-memory twin of the Redis task queue (W1, W2)."""

from __future__ import annotations

from collections.abc import Sequence

from plaita.adapters.memory.streams import MemoryGroupStream
from plaita.application.codec import (
    RawFields,
    decode_dead_letter,
    decode_delivery,
    encode_dead_letter,
    encode_envelope,
)
from plaita.application.ports import Clock, DeadLetter, Delivery, QueueStats
from plaita.domain.config_generations import DEFAULT_DLQ_MAX_LEN, check_dlq_max_len
from plaita.domain.envelope import TaskEnvelope


class MemoryTaskQueue:
    """TaskQueue in memory; entries are stored encoded, exactly as on the Redis stream."""

    def __init__(self, clock: Clock, *, dead_letter_max_len: int = DEFAULT_DLQ_MAX_LEN) -> None:
        self._stream: MemoryGroupStream[str | bytes] = MemoryGroupStream(clock)
        self._dead_letters: MemoryGroupStream[str] = MemoryGroupStream(clock)
        self._dead_letter_max_len = check_dlq_max_len(dead_letter_max_len)
        self._dropped = 0

    async def ensure_group(self) -> None:
        """The in-memory stream always has its one consumer group."""

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        return await self.enqueue_raw(encode_envelope(envelope))

    async def enqueue_raw(self, fields: RawFields) -> str:
        """Append fields as they are, bypassing the codec (to test malformed entries)."""
        return await self._stream.add({name: value for name, value in fields.items()})

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        delivered = await self._stream.read_new(consumer, count=count, block_ms=block_ms)
        return [decode_delivery(*entry) for entry in delivered]

    async def ack(self, message_id: str) -> None:
        self._stream.ack(message_id)

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        delivered = self._stream.claim_idle(consumer, min_idle_ms=min_idle_ms, count=count)
        return [decode_delivery(*entry, reclaimed=True) for entry in delivered]

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        return self._stream.touch(consumer, message_ids)

    async def stats(self) -> QueueStats:
        return QueueStats(
            length=self._stream.length,
            pending=self._stream.pending,
            oldest_unread_ms=self._stream.oldest_unread_ms(),
        )

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        dlq_id = await self._dead_letters.add(encode_dead_letter(delivery, reason))
        self._dropped += self._dead_letters.trim_to(self._dead_letter_max_len)
        self._stream.ack(delivery.message_id)
        return dlq_id

    async def dead_letters_dropped(self) -> int:
        return self._dropped

    async def dead_letter_length(self) -> int:
        return self._dead_letters.length

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        return [decode_dead_letter(*entry) for entry in self._dead_letters.newest(count)]

    async def trim_acknowledged(self) -> int:
        return self._stream.trim_acknowledged(min_age_ms=0)

    async def close(self) -> None:
        """Nothing to release: the twin has no open reads (the Redis queue's partitions do)."""
