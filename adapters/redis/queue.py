"""The task queue on Redis streams with one consumer group (W1, W2), in P partitions.

With ``--partitions 1`` (the default) it is one stream, ``{ns}:q:{<queue>}:stream``, its DLQ
``…:dlq`` and delay set ``…:delayed``. With P > 1, partition k has its own three keys under
the hash tag ``{<queue>:p<k>}`` (``RedisKeys.queue_tag``), and every carrier of an execution
goes to the partition ``partition_of(execution_id, P)``. Message and DLQ ids name their
partition (``plaita.domain.partitions.qualified_id``), so ack, touch and dead-letter find
the stream again from the id alone; the TaskQueue port does not know partitions exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue_partitions import PartitionedReads, waiting_carriers
from plaita.adapters.redis.stream_trim import StreamTrimmer
from plaita.adapters.redis.streams import RedisGroupStream, text, text_fields, undecoded
from plaita.application.codec import (
    RawFields,
    decode_dead_letter,
    decode_delivery,
    encode_dead_letter,
    encode_envelope,
    envelope_document,
)
from plaita.application.ports import DeadLetter, Delivery, QueueStats
from plaita.domain.config_generations import DEFAULT_DLQ_MAX_LEN, check_dlq_max_len
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.partitions import (
    DEFAULT_PARTITIONS,
    check_partitions,
    partition_change_refusal,
    partition_of,
    qualified_id,
    split_id,
)

DEFAULT_QUEUE = "default"
WORKER_GROUP = "plaita-workers"


class RedisTaskQueue:
    """TaskQueue on ``{ns}:q:{<queue_name>}:stream`` and ``…:dlq`` (or their partitions).

    Each stream is trimmed below its oldest pending or unread entry (``trim_acknowledged``);
    each DLQ is capped at ``dead_letter_max_len`` entries, oldest dropped first (W10).
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
        partitions: int = DEFAULT_PARTITIONS,
    ) -> None:
        """``dead_letter_key`` overrides ``…:dlq`` (``--dlq-key``); it must carry the queue's
        hash tag ``{<queue_name>}`` so a dead letter, its cap and its ack stay one
        MULTI/EXEC (with P > 1, partition k's DLQ is that key with the tag ``{<queue>:p<k>}``).
        """
        self._client = client
        self._keys = keys
        self._queue_name = queue_name
        self._partitions = check_partitions(partitions)
        self._dead_letter_max_len = check_dlq_max_len(dead_letter_max_len)
        self._dropped = 0
        layout = _layout(self._partitions)
        self._streams = [
            RedisGroupStream(client, keys.queue_stream(queue_name, k), group) for k in layout
        ]
        dead_letters = dead_letter_key or keys.queue_dead_letters(queue_name)
        self._dead_letters = [keys.partition_key(dead_letters, queue_name, k) for k in layout]
        self._trimmers = [StreamTrimmer(client, stream.stream) for stream in self._streams]
        self._reads = PartitionedReads(self._streams)

    @property
    def partitions(self) -> int:
        return self._partitions

    async def ensure_group(self) -> None:
        """Check the partition count against the deployment's, then create every group.

        Raises ``PartitionCountChangedError`` when the deployment was started with another
        ``--partitions`` and carriers still wait in that layout.
        """
        await self._check_layout()
        for stream in self._streams:
            await stream.ensure_group()

    async def enqueue(self, envelope: TaskEnvelope) -> str:
        partition = partition_of(envelope.execution_id, self._partitions)
        return await self._add(partition, encode_envelope(envelope))

    async def enqueue_raw(self, fields: RawFields) -> str:
        """Append fields as they are, bypassing the codec (to test malformed entries); on the
        partition of the execution they name, if any, else partition 0."""
        document = envelope_document(text_fields(fields))
        execution_id = None if document is None else document.get("execution_id")
        partition = (
            partition_of(execution_id, self._partitions) if isinstance(execution_id, str) else 0
        )
        return await self._add(partition, fields)

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        if self._partitions == 1:
            entries = await self._streams[0].read(
                consumer, start=">", count=count, block_ms=block_ms
            )
            return [decode_delivery(message_id, fields, 1) for message_id, fields in entries]
        read = await self._reads.read(consumer, count=count, block_ms=block_ms)
        return [
            decode_delivery(self._id(partition, message_id), fields, 1)
            for partition, (message_id, fields) in read
        ]

    async def ack(self, message_id: str) -> None:
        where = split_id(message_id, self._partitions)
        if where is not None:  # not one of this queue's ids: nothing of it is pending
            await self._streams[where[0]].ack(where[1])

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        deliveries: list[Delivery] = []
        taken: list[tuple[int, str]] = []
        for partition, stream in enumerate(self._streams):
            if len(deliveries) >= count:
                break
            entries = await stream.claim_idle(
                consumer, min_idle_ms=min_idle_ms, count=count - len(deliveries)
            )
            if not entries:
                continue
            counts = await stream.delivery_counts([message_id for message_id, _ in entries])
            for message_id, fields in entries:
                taken.append((partition, message_id))
                deliveries.append(
                    decode_delivery(
                        self._id(partition, message_id),
                        fields,
                        counts.get(message_id, 1),
                        reclaimed=True,
                    )
                )
        if taken and self._partitions > 1:
            self._reads.forget(taken)
        return deliveries

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        by_partition: dict[int, list[str]] = {}
        for message_id in message_ids:
            where = split_id(message_id, self._partitions)
            if where is not None:  # an id of no partition is not pending: ignored
                by_partition.setdefault(where[0], []).append(where[1])
        touched = 0
        for partition, ids in by_partition.items():
            touched += await self._streams[partition].touch(consumer, ids)
        return touched

    async def stats(self) -> QueueStats:
        length = pending = 0
        oldest: int | None = None
        for stream in self._streams:
            stream_length, stream_pending = await stream.length_and_pending()
            length += stream_length
            pending += stream_pending
            unread = await stream.oldest_unread_ms() if stream_length else None
            if unread is not None and (oldest is None or unread < oldest):
                oldest = unread
        return QueueStats(length=length, pending=pending, oldest_unread_ms=oldest)

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        where = split_id(delivery.message_id, self._partitions)
        if where is None:
            raise ValueError(f"{delivery.message_id!r} is not a message id of this queue")
        partition, message_id = where
        stream, dead_letters = self._streams[partition], self._dead_letters[partition]
        # Both keys share the partition's hash tag, so one MULTI/EXEC copies, caps and acks
        # together. XTRIM rather than XADD MAXLEN: it answers how many it dropped. Exact
        # (no ~): the cap is a promise to the operator, not a hint.
        evidence: dict[Any, Any] = encode_dead_letter(delivery, reason)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xadd(dead_letters, evidence)
            pipe.xtrim(dead_letters, maxlen=self._dead_letter_max_len, approximate=False)
            pipe.xack(stream.stream, stream.group, message_id)
            dlq_id, dropped, _acked = await pipe.execute()
        self._dropped += int(dropped)
        return self._id(partition, text(dlq_id))

    async def dead_letters_dropped(self) -> int:
        return self._dropped

    async def dead_letter_length(self) -> int:
        """The entries of every partition's DLQ (each capped on its own, W10)."""
        if self._partitions == 1:
            return int(await self._client.xlen(self._dead_letters[0]))
        # Not transactional: split per node on a cluster, one round trip on a single node.
        async with self._client.pipeline(transaction=False) as pipe:
            for key in self._dead_letters:
                pipe.xlen(key)
            lengths = await pipe.execute()
        return sum(int(length) for length in lengths)

    async def dead_letters(self, *, count: int = 100) -> list[DeadLetter]:
        """The newest ``count`` of every partition's DLQ, merged newest first."""
        merged: list[tuple[tuple[int, int], DeadLetter]] = []
        for partition, key in enumerate(self._dead_letters):
            # Undecoded, as the task stream: a hand-written entry must not hide the others.
            entries = await undecoded(self._client, "XREVRANGE", key, "+", "-", "COUNT", count)
            for dlq_id, fields in entries or []:
                stream_id = text(dlq_id)
                letter = decode_dead_letter(self._id(partition, stream_id), text_fields(fields))
                merged.append((_order(stream_id), letter))
        merged.sort(key=lambda item: item[0], reverse=True)
        return [letter for _, letter in merged[:count]]

    async def trim_acknowledged(self) -> int:
        trimmed = 0
        for trimmer in self._trimmers:
            trimmed += await trimmer.trim(min_age_ms=0)
        return trimmed

    async def close(self) -> None:
        """Cancel the blocking reads still open on the partitions (P > 1); what they had
        read stays pending on the consumer, for reclaim."""
        await self._reads.close()

    # --- partitions -------------------------------------------------------------------

    async def _add(self, partition: int, fields: RawFields) -> str:
        return self._id(partition, await self._streams[partition].add(fields))

    def _id(self, partition: int, stream_id: str) -> str:
        return qualified_id(stream_id, partition, self._partitions)

    async def _check_layout(self) -> None:
        """A change of ``--partitions`` is refused while the recorded layout holds carriers;
        once it is drained, the new count is recorded. No record: the one-partition layout
        every deployment had before partitions existed (and P = 1 writes none)."""
        key = self._keys.queue_partitions(self._queue_name)
        value = await self._client.get(key)
        recorded = int(text(value)) if value is not None else DEFAULT_PARTITIONS
        if recorded == self._partitions:
            return
        old = _layout(recorded)
        group = self._streams[0].group
        streams = [
            RedisGroupStream(self._client, self._keys.queue_stream(self._queue_name, k), group)
            for k in old
        ]
        delayed = [self._keys.queue_delayed(self._queue_name, k) for k in old]
        waiting = await waiting_carriers(self._client, streams, delayed)
        if waiting:
            raise partition_change_refusal(self._queue_name, recorded, self._partitions, waiting)
        await self._client.set(key, str(self._partitions))


def _layout(partitions: int) -> list[int | None]:
    """The partition argument of each key: None for the one-partition layout's own keys."""
    return [None] if partitions == 1 else list(range(partitions))


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)
