"""The delay queue on a Redis sorted set, moved into the task stream by one script (W8, V8).

With P partitions (``--partitions``) each partition has its own delay set, moved into its own
stream: the set and the stream share the partition's hash tag, so the move stays one script.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.queue import DEFAULT_QUEUE
from plaita.adapters.redis.scripts import read_script
from plaita.application.codec import encode_envelope
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.partitions import DEFAULT_PARTITIONS, check_partitions, partition_of
from plaita.domain.priorities import Priority

#: The field a member that is not a carrier of this adapter is moved under (R4 evidence).
RAW_MEMBER_FIELD = "delayed_raw"


class RedisDelayQueue:
    """DelayQueue on ``{ns}:q:{<queue_name>}:delayed``, moving into ``…:stream``.

    A member is ``{"id": <timer id>, "fields": [k1, v1, k2, v2, ...]}``: the stream fields of
    ``encode_envelope`` exactly, so a moved carrier reads like an enqueued one, and a fresh
    timer id, so two identical envelopes are two members. The score is the due time in ms.
    Members due at the same millisecond move in no particular order. A high or low carrier's
    member also names its priority (``"priority"``), which picks the stream it moves into;
    a normal one's is as it always was.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        queue_name: str = DEFAULT_QUEUE,
        *,
        partitions: int = DEFAULT_PARTITIONS,
    ) -> None:
        self._client = client
        self._partitions = check_partitions(partitions)
        layout: list[int | None] = [None] if partitions == 1 else list(range(partitions))
        #: (delay set, normal stream) of each partition; one pair, the queue's own, with P = 1.
        self._pairs = [
            (keys.queue_delayed(queue_name, k), keys.queue_stream(queue_name, k)) for k in layout
        ]
        #: Every key the move of each partition touches: its delay set, then its streams.
        self._move_keys = [
            [
                keys.queue_delayed(queue_name, k),
                *(keys.queue_stream(queue_name, k, level) for level in _MOVE_LEVELS),
            ]
            for k in layout
        ]
        self._next_start = 0
        self._move = client.register_script(read_script("delay_move"))

    async def schedule(self, envelope: TaskEnvelope, *, due_ms: int) -> str:
        partition = partition_of(envelope.execution_id, self._partitions)
        return await self._schedule(
            partition, encode_envelope(envelope), due_ms, priority=envelope.priority
        )

    async def schedule_raw(self, fields: Mapping[str, str], *, due_ms: int) -> str:
        """Hold stream fields as they are until ``due_ms``; the timer id (partition 0)."""
        return await self._schedule(0, fields, due_ms)

    async def _schedule(
        self,
        partition: int,
        fields: Mapping[str, str],
        due_ms: int,
        *,
        priority: Priority = Priority.NORMAL,
    ) -> str:
        if not fields:
            raise ValueError("a delayed carrier needs at least one stream field")
        timer_id = uuid.uuid4().hex
        flat = [part for field, value in fields.items() for part in (field, value)]
        carrier: dict[str, object] = {"id": timer_id, "fields": flat}
        if priority is not Priority.NORMAL:
            carrier["priority"] = priority.value
        member = json.dumps(carrier, separators=(",", ":"))
        await self._client.zadd(self._pairs[partition][0], {member: due_ms})
        return timer_id

    async def move_due(self, *, now_ms: int, limit: int = 500) -> int:
        """Up to ``limit`` due carriers, one script per partition (each atomic on its own: a
        carrier is never in both places nor in neither).

        With P > 1 one pipelined peek first finds the partitions with a due carrier, so an
        idle tick costs one round trip (one per node on a cluster), not P scripts; each call
        starts one partition further, so no partition's timers always wait for the others'.
        """
        if limit <= 0:
            return 0
        if self._partitions == 1:
            return int(await self._move(keys=self._move_keys[0], args=[now_ms, limit]))
        # Not transactional: split per node on a cluster, one round trip on a single node.
        async with self._client.pipeline(transaction=False) as pipe:
            for delayed, _stream in self._pairs:
                pipe.zrangebyscore(delayed, "-inf", now_ms, start=0, num=1)
            peeked = await pipe.execute()
        start = self._next_start
        self._next_start = (start + 1) % self._partitions
        moved = 0
        for offset in range(self._partitions):
            partition = (start + offset) % self._partitions
            if not peeked[partition]:
                continue
            keys = self._move_keys[partition]
            moved += int(await self._move(keys=keys, args=[now_ms, limit - moved]))
            if moved >= limit:
                break
        return moved

    async def pending(self) -> int:
        if self._partitions == 1:
            return int(await self._client.zcard(self._pairs[0][0]))
        # Not transactional: split per node on a cluster, one round trip on a single node.
        async with self._client.pipeline(transaction=False) as pipe:
            for delayed, _stream in self._pairs:
                pipe.zcard(delayed)
            counts = await pipe.execute()
        return sum(int(count) for count in counts)


#: The streams a move may write to, in the order of its KEYS after the delay set (the
#: script's ``"priority"`` names them by value).
_MOVE_LEVELS = (Priority.NORMAL, Priority.HIGH, Priority.LOW)
