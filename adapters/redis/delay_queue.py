"""The delay queue on a Redis sorted set, moved into the task stream by one script (W8, V8)."""

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

#: The field a member that is not a carrier of this adapter is moved under (R4 evidence).
RAW_MEMBER_FIELD = "delayed_raw"


class RedisDelayQueue:
    """DelayQueue on ``{ns}:q:{<queue_name>}:delayed``, moving into ``…:stream``.

    A member is ``{"id": <timer id>, "fields": [k1, v1, k2, v2, ...]}``: the stream fields of
    ``encode_envelope`` exactly, so a moved carrier reads like an enqueued one, and a fresh
    timer id, so two identical envelopes are two members. The score is the due time in ms.
    Members due at the same millisecond move in no particular order.
    """

    def __init__(
        self, client: redis.Redis, keys: RedisKeys, queue_name: str = DEFAULT_QUEUE
    ) -> None:
        self._client = client
        self._delayed = keys.queue_delayed(queue_name)
        self._stream = keys.queue_stream(queue_name)
        self._move = client.register_script(read_script("delay_move"))

    async def schedule(self, envelope: TaskEnvelope, *, due_ms: int) -> str:
        return await self.schedule_raw(encode_envelope(envelope), due_ms=due_ms)

    async def schedule_raw(self, fields: Mapping[str, str], *, due_ms: int) -> str:
        """Hold stream fields as they are until ``due_ms``; the timer id."""
        if not fields:
            raise ValueError("a delayed carrier needs at least one stream field")
        timer_id = uuid.uuid4().hex
        flat = [part for field, value in fields.items() for part in (field, value)]
        member = json.dumps({"id": timer_id, "fields": flat}, separators=(",", ":"))
        await self._client.zadd(self._delayed, {member: due_ms})
        return timer_id

    async def move_due(self, *, now_ms: int, limit: int = 500) -> int:
        if limit <= 0:
            return 0
        moved = await self._move(keys=[self._delayed, self._stream], args=[now_ms, limit])
        return int(moved)

    async def pending(self) -> int:
        return int(await self._client.zcard(self._delayed))
