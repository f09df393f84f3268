"""In-memory twin of the Redis task queue (W1, W2)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from plaita.adapters.memory.streams import MemoryGroupStream
from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.ports import Clock, DeadLetter, Delivery, QueueStats
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.errors import InvalidEnvelopeError, SchemaVersionError


class MemoryTaskQueue:
    """TaskQueue in memory; entries are stored encoded, exactly as on the Redis stream."""

    def __init__(self, clock: Clock) -> None:
        self._stream = MemoryGroupStream(clock)
        self._dead_letters = MemoryGroupStream(clock)

    async def ensure_group(self) -> None:
        """The in-memory stream always has its one consumer group."""

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        return await self._stream.add(encode_envelope(envelope))

    async def enqueue_raw(self, fields: Mapping[str, str]) -> str:
        """Append fields as they are, bypassing the codec (to test malformed entries)."""
        return await self._stream.add(fields)

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        delivered = await self._stream.read_new(consumer, count=count, block_ms=block_ms)
        return [_delivery(*entry) for entry in delivered]

    async def ack(self, message_id: str) -> None:
        self._stream.ack(message_id)

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        delivered = self._stream.claim_idle(consumer, min_idle_ms=min_idle_ms, count=count)
        return [_delivery(*entry, reclaimed=True) for entry in delivered]

    async def stats(self) -> QueueStats:
        return QueueStats(length=self._stream.length, pending=self._stream.pending)

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        dlq_id = await self._dead_letters.add(_dead_letter_fields(delivery, reason))
        self._stream.ack(delivery.message_id)
        return dlq_id

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        return [_dead_letter(*entry) for entry in self._dead_letters.newest(count)]


def _delivery(
    message_id: str, fields: dict[str, str], delivery_count: int, *, reclaimed: bool = False
) -> Delivery:
    try:
        envelope = decode_envelope(fields)
    except (InvalidEnvelopeError, SchemaVersionError) as exc:
        return Delivery(message_id, None, fields, delivery_count, reclaimed, problem=str(exc))
    return Delivery(message_id, envelope, fields, delivery_count, reclaimed)


def _dead_letter_fields(delivery: Delivery, reason: str) -> dict[str, str]:
    raw = json.dumps(delivery.raw, separators=(",", ":"), sort_keys=True)
    return {"message_id": delivery.message_id, "reason": reason, "raw": raw}


def _dead_letter(dlq_id: str, fields: dict[str, str]) -> DeadLetter:
    return DeadLetter(
        dlq_id=dlq_id,
        message_id=fields.get("message_id", ""),
        reason=fields.get("reason", ""),
        raw=json.loads(fields.get("raw", "{}")),
    )
