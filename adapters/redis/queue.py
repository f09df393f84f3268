"""The task queue on a Redis stream with one consumer group (W1, W2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.stream_trim import StreamTrimmer
from plaita.adapters.redis.streams import RedisGroupStream, text, text_fields, undecoded
from plaita.application.codec import (
    RawFields,
    decode_dead_letter,
    decode_delivery,
    encode_dead_letter,
    encode_envelope,
)
from plaita.application.ports import DeadLetter, Delivery, QueueStats
from plaita.domain.config_generations import DEFAULT_DLQ_MAX_LEN, check_dlq_max_len
from plaita.domain.envelope import TaskEnvelope

DEFAULT_QUEUE = "default"
WORKER_GROUP = "plaita-workers"


class RedisTaskQueue:
    """TaskQueue on ``{ns}:q:{<queue_name>}:stream`` and ``…:dlq``.

    The stream is trimmed below its oldest pending or unread entry (``trim_acknowledged``);
    the DLQ is capped at ``dead_letter_max_len`` entries, oldest dropped first (W10).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        queue_name: str = DEFAULT_QUEUE,
        group: str = WORKER_GROUP,
        dead_letter_key: str | None = None,
        *,
        dead_letter_max_len: int = DEFAULT_DLQ_MAX_LEN,
    ) -> None:
        """``dead_letter_key`` overrides ``…:dlq`` (``--dlq-key``); it must carry the queue's
        hash tag ``{<queue_name>}`` so a dead letter, its cap and its ack stay one
        MULTI/EXEC."""
        self._client = client
        self._dead_letter_max_len = check_dlq_max_len(dead_letter_max_len)
        self._dropped = 0
        self._stream = RedisGroupStream(client, keys.queue_stream(queue_name), group)
        self._dead_letters = dead_letter_key or keys.queue_dead_letters(queue_name)
        self._trimmer = StreamTrimmer(client, keys.queue_stream(queue_name))

    async def ensure_group(self) -> None:
        await self._stream.ensure_group()

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        return await self._stream.add(encode_envelope(envelope))

    async def enqueue_raw(self, fields: RawFields) -> str:
        """Append fields as they are, bypassing the codec (to test malformed entries)."""
        return await self._stream.add(fields)

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        entries = await self._stream.read(consumer, start=">", count=count, block_ms=block_ms)
        return [decode_delivery(message_id, fields, 1) for message_id, fields in entries]

    async def ack(self, message_id: str) -> None:
        await self._stream.ack(message_id)

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        entries = await self._stream.claim_idle(consumer, min_idle_ms=min_idle_ms, count=count)
        counts = await self._stream.delivery_counts([message_id for message_id, _ in entries])
        return [
            decode_delivery(message_id, fields, counts.get(message_id, 1), reclaimed=True)
            for message_id, fields in entries
        ]

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        return await self._stream.touch(consumer, message_ids)

    async def stats(self) -> QueueStats:
        length, pending = await self._stream.length_and_pending()
        oldest = await self._stream.oldest_unread_ms() if length else None
        return QueueStats(length=length, pending=pending, oldest_unread_ms=oldest)

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        # Both keys share the queue's hash tag, so one MULTI/EXEC copies, caps and acks
        # together. XTRIM rather than XADD MAXLEN: it answers how many it dropped. Exact
        # (no ~): the cap is a promise to the operator, not a hint.
        evidence: dict[Any, Any] = encode_dead_letter(delivery, reason)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xadd(self._dead_letters, evidence)
            pipe.xtrim(self._dead_letters, maxlen=self._dead_letter_max_len, approximate=False)
            pipe.xack(self._stream.stream, self._stream.group, delivery.message_id)
            dlq_id, dropped, _acked = await pipe.execute()
        self._dropped += int(dropped)
        return text(dlq_id)

    async def dead_letters_dropped(self) -> int:
        return self._dropped

    async def dead_letter_length(self) -> int:
        return int(await self._client.xlen(self._dead_letters))

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        # Undecoded, as the task stream: a hand-written entry must not hide the others.
        entries = await undecoded(
            self._client, "XREVRANGE", self._dead_letters, "+", "-", "COUNT", count
        )
        return [
            decode_dead_letter(text(dlq_id), text_fields(fields))
            for dlq_id, fields in entries or []
        ]

    async def trim_acknowledged(self) -> int:
        return await self._trimmer.trim(min_age_ms=0)
