"""The task queue on a Redis stream with one consumer group (W1, W2)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import RedisGroupStream, text, text_fields
from plaita.application.codec import decode_envelope, encode_envelope
from plaita.application.ports import DeadLetter, Delivery, QueueStats
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.errors import InvalidEnvelopeError, SchemaVersionError

DEFAULT_QUEUE = "default"
WORKER_GROUP = "plaita-workers"


class RedisTaskQueue:
    """TaskQueue on ``{ns}:q:{<queue_name>}:stream`` and ``…:dlq``; neither is ever trimmed."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        queue_name: str = DEFAULT_QUEUE,
        group: str = WORKER_GROUP,
    ) -> None:
        self._client = client
        self._stream = RedisGroupStream(client, keys.queue_stream(queue_name), group)
        self._dead_letters = keys.queue_dead_letters(queue_name)

    async def ensure_group(self) -> None:
        await self._stream.ensure_group()

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        return await self._stream.add(encode_envelope(envelope))

    async def enqueue_raw(self, fields: Mapping[str, str]) -> str:
        """Append fields as they are, bypassing the codec (to test malformed entries)."""
        return await self._stream.add(fields)

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        entries = await self._stream.read(consumer, start=">", count=count, block_ms=block_ms)
        return [_delivery(message_id, fields, 1) for message_id, fields in entries]

    async def ack(self, message_id: str) -> None:
        await self._stream.ack(message_id)

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        entries = await self._stream.claim_idle(consumer, min_idle_ms=min_idle_ms, count=count)
        counts = await self._stream.delivery_counts([message_id for message_id, _ in entries])
        return [
            _delivery(message_id, fields, counts.get(message_id, 1), reclaimed=True)
            for message_id, fields in entries
        ]

    async def stats(self) -> QueueStats:
        length, pending = await self._stream.length_and_pending()
        return QueueStats(length=length, pending=pending)

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        # Both keys share the queue's hash tag, so one MULTI/EXEC copies and acks together.
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xadd(self._dead_letters, _dead_letter_fields(delivery, reason))
            pipe.xack(self._stream.stream, self._stream.group, delivery.message_id)
            dlq_id, _acked = await pipe.execute()
        return text(dlq_id)

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        entries = await self._client.xrevrange(self._dead_letters, count=count) or []
        return [_dead_letter(text(dlq_id), text_fields(fields)) for dlq_id, fields in entries]


def _delivery(
    message_id: str, fields: dict[str, str], delivery_count: int, *, reclaimed: bool = False
) -> Delivery:
    try:
        envelope = decode_envelope(fields)
    except (InvalidEnvelopeError, SchemaVersionError) as exc:
        return Delivery(message_id, None, fields, delivery_count, reclaimed, problem=str(exc))
    return Delivery(message_id, envelope, fields, delivery_count, reclaimed)


def _dead_letter_fields(delivery: Delivery, reason: str) -> dict[Any, Any]:
    raw = json.dumps(delivery.raw, separators=(",", ":"), sort_keys=True)
    return {"message_id": delivery.message_id, "reason": reason, "raw": raw}


def _dead_letter(dlq_id: str, fields: dict[str, str]) -> DeadLetter:
    return DeadLetter(
        dlq_id=dlq_id,
        message_id=fields.get("message_id", ""),
        reason=fields.get("reason", ""),
        raw=json.loads(fields.get("raw", "{}")),
    )
