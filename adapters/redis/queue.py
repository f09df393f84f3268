"""The task queue on Redis streams with one consumer group (W1, W2), in P partitions.

With ``--partitions 1`` (the default) it is one stream, ``{ns}:q:{<queue>}:stream``, its DLQ
``…:dlq`` and delay set ``…:delayed``. With P > 1, partition k has its own three keys under
the hash tag ``{<queue>:p<k>}`` (``RedisKeys.queue_tag``), and every carrier of an execution
goes to the partition ``partition_of(execution_id, P)``. Message and DLQ ids name their
partition (``plaita.domain.partitions.qualified_id``), so ack, touch and dead-letter find
the stream again from the id alone; the TaskQueue port does not know partitions exist.

Each partition has three streams, one per priority (``RedisKeys.queue_stream``: the normal
one is ``…:stream`` as it always was, ``…:stream:high`` and ``…:stream:low`` beside it under
the same hash tag), read together by one XREADGROUP and taken in priority order
(``queue_priorities``); a message id names its level as it names its partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue_partitions import PartitionedReads, waiting_carriers
from plaita.adapters.redis.queue_priorities import (
    PartitionEntry,
    PriorityBuffer,
    PriorityStreams,
)
from plaita.adapters.redis.stream_trim import StreamTrimmer
from plaita.adapters.redis.streams import (
    RedisGroupStream,
    lengths_and_pending,
    text,
    text_fields,
    undecoded,
)
from plaita.application.codec import (
    RawFields,
    carrier_priority,
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
from plaita.domain.priorities import (
    PRIORITIES,
    Priority,
    priority_id,
    split_priority_id,
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
        #: Each partition's priority streams; ``_streams`` every stream of every partition.
        self._levels = [_priority_streams(client, keys, queue_name, k, group) for k in layout]
        self._streams = [stream for levels in self._levels for stream in levels.all]
        dead_letters = dead_letter_key or keys.queue_dead_letters(queue_name)
        self._dead_letters = [keys.partition_key(dead_letters, queue_name, k) for k in layout]
        self._trimmers = [
            StreamTrimmer(client, *(stream.stream for stream in levels.all))
            for levels in self._levels
        ]
        self._reads = PartitionedReads(self._levels, in_priority_order=True)
        #: With one partition: each consumer's read-ahead (see ``read``).
        self._buffers: dict[str, PriorityBuffer] = {}

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
        return await self._add(partition, envelope.priority, encode_envelope(envelope))

    async def enqueue_raw(self, fields: RawFields) -> str:
        """Append fields as they are, bypassing the codec (to test malformed entries); on the
        partition of the execution they name, if any, else partition 0, and the stream of
        the priority they name, if it is one, else the normal one."""
        document = envelope_document(text_fields(fields)) or {}
        execution_id = document.get("execution_id")
        partition = (
            partition_of(execution_id, self._partitions) if isinstance(execution_id, str) else 0
        )
        return await self._add(partition, carrier_priority(document), fields)

    async def read(self, consumer: str, *, count: int, block_ms: int) -> list[Delivery]:
        if self._partitions == 1:
            taken = await self._read_one_partition(consumer, count=count, block_ms=block_ms)
        else:
            taken = await self._reads.read(consumer, count=count, block_ms=block_ms)
        return [
            decode_delivery(self._id(partition, message_id), fields, 1)
            for partition, (message_id, fields) in taken
        ]

    async def _read_one_partition(
        self, consumer: str, *, count: int, block_ms: int
    ) -> list[PartitionEntry]:
        """One XREADGROUP for the levels with fewer than ``count`` read ahead (none when each
        has enough), blocking only when nothing is read ahead; then the domain's share.

        Asking for every short level keeps the share true across small reads (a read of 1
        still sees whether high has work); a level's read-ahead stays below twice ``count``. A
        normal-only workload reads nothing ahead: one round trip per call, as before.
        """
        buffer = self._buffers.setdefault(consumer, PriorityBuffer())
        levels = buffer.short_levels(count)
        if levels:
            entries = await self._levels[0].read(
                consumer, count=count, block_ms=0 if buffer else block_ms, levels=levels
            )
            buffer.extend(0, entries)
        return buffer.take(count)

    async def ack(self, message_id: str) -> None:
        where = self._where(message_id)
        if where is not None:  # not one of this queue's ids: nothing of it is pending
            stream, stream_id = where
            await stream.ack(stream_id)

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int) -> list[Delivery]:
        deliveries: list[Delivery] = []
        taken: list[tuple[int, str]] = []
        for partition, levels in enumerate(self._levels):
            for level, stream in levels.by_level.items():
                if len(deliveries) >= count:
                    break
                entries = await stream.claim_idle(
                    consumer, min_idle_ms=min_idle_ms, count=count - len(deliveries)
                )
                if not entries:
                    continue
                counts = await stream.delivery_counts([message_id for message_id, _ in entries])
                for message_id, fields in entries:
                    read_id = priority_id(message_id, level)
                    taken.append((partition, read_id))
                    deliveries.append(
                        decode_delivery(
                            self._id(partition, read_id),
                            fields,
                            counts.get(message_id, 1),
                            reclaimed=True,
                        )
                    )
        if taken:
            if self._partitions > 1:
                self._reads.forget(taken)
            for buffer in self._buffers.values():
                buffer.forget(taken)
        return deliveries

    async def touch(self, consumer: str, message_ids: Sequence[str]) -> int:
        by_stream: dict[str, tuple[RedisGroupStream, list[str]]] = {}
        for message_id in message_ids:
            where = self._where(message_id)
            if where is not None:  # an id of no stream is not pending: ignored
                stream, stream_id = where
                by_stream.setdefault(stream.stream, (stream, []))[1].append(stream_id)
        touched = 0
        for stream, ids in by_stream.values():
            touched += await stream.touch(consumer, ids)
        return touched

    async def stats(self) -> QueueStats:
        length = pending = 0
        oldest: int | None = None
        for levels in self._levels:
            counts = await lengths_and_pending(self._client, levels.all)
            for stream, (stream_length, stream_pending) in zip(levels.all, counts, strict=True):
                length += stream_length
                pending += stream_pending
                unread = await stream.oldest_unread_ms() if stream_length else None
                if unread is not None and (oldest is None or unread < oldest):
                    oldest = unread
        return QueueStats(length=length, pending=pending, oldest_unread_ms=oldest)

    async def dead_letter(self, delivery: Delivery, reason: str) -> str:
        where = self._where(delivery.message_id)
        if where is None:
            raise ValueError(f"{delivery.message_id!r} is not a message id of this queue")
        stream, message_id = where
        partition = self._partition_of_id(delivery.message_id)
        dead_letters = self._dead_letters[partition]
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
        """Cancel the blocking reads still open on the partitions (P > 1) and drop what was
        read ahead; what they had read stays pending on the consumer, for reclaim."""
        self._buffers.clear()
        await self._reads.close()

    # --- partitions -------------------------------------------------------------------

    async def _add(self, partition: int, priority: Priority, fields: RawFields) -> str:
        stream_id = await self._levels[partition].by_level[priority].add(fields)
        return self._id(partition, priority_id(stream_id, priority))

    def _id(self, partition: int, read_id: str) -> str:
        """The message id of an entry of ``partition`` whose id, as read, names its level:
        the partition inside (``<ms>-<seq * P + k>``), the level's band on top."""
        where = split_priority_id(read_id)
        if where is None:
            return qualified_id(read_id, partition, self._partitions)
        level, stream_id = where
        return priority_id(qualified_id(stream_id, partition, self._partitions), level)

    def _where(self, message_id: str) -> tuple[RedisGroupStream, str] | None:
        """The stream and stream id a message id of ``_id`` names; None when it names none."""
        level_and_id = split_priority_id(message_id)
        if level_and_id is None:
            return None
        level, qualified = level_and_id
        where = split_id(qualified, self._partitions)
        if where is None:
            return None
        partition, stream_id = where
        return self._levels[partition].by_level[level], stream_id

    def _partition_of_id(self, message_id: str) -> int:
        level_and_id = split_priority_id(message_id)
        where = None if level_and_id is None else split_id(level_and_id[1], self._partitions)
        return 0 if where is None else where[0]

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
            stream
            for k in old
            for stream in _priority_streams(
                self._client, self._keys, self._queue_name, k, group
            ).all
        ]
        delayed = [self._keys.queue_delayed(self._queue_name, k) for k in old]
        waiting = await waiting_carriers(self._client, streams, delayed)
        if waiting:
            raise partition_change_refusal(self._queue_name, recorded, self._partitions, waiting)
        await self._client.set(key, str(self._partitions))


def _priority_streams(
    client: redis.Redis, keys: RedisKeys, queue_name: str, partition: int | None, group: str
) -> PriorityStreams:
    streams = {level: keys.queue_stream(queue_name, partition, level) for level in PRIORITIES}
    return PriorityStreams(client, streams, group)


def _layout(partitions: int) -> list[int | None]:
    """The partition argument of each key: None for the one-partition layout's own keys."""
    return [None] if partitions == 1 else list(range(partitions))


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)
