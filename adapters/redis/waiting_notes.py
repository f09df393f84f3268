"""Flow-control notes on Redis: ``…:x:{<id>}:waiting``, a JSON string with a TTL.

In the execution's tenant namespace and hash tag, beside its checkpoint; written without the
lease (one SET with PX), read by the console and ``plaita executions show`` (one MGET-like
pipeline for a page).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.domain.flow_control import WAITING_NOTE_TTL_MS, Waiting


class RedisWaitingNotes:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    async def note(self, execution_id: str, waiting: Waiting) -> None:
        key = self._keys.execution_waiting(execution_id)
        await self._client.set(key, waiting.to_json(), px=WAITING_NOTE_TTL_MS)

    async def clear(self, execution_id: str) -> None:
        await self._client.delete(self._keys.execution_waiting(execution_id))

    async def get(self, execution_id: str) -> Waiting | None:
        return (await self.get_many([execution_id])).get(execution_id)

    async def get_many(self, execution_ids: Sequence[str]) -> Mapping[str, Waiting]:
        ids = list(dict.fromkeys(execution_ids))
        if not ids:
            return {}
        # One key per execution, each in its own slot: a pipeline, not an MGET.
        async with self._client.pipeline(transaction=False) as pipe:
            for execution_id in ids:
                pipe.get(self._keys.execution_waiting(execution_id))
            replies = await pipe.execute()
        notes: dict[str, Waiting] = {}
        for execution_id, raw in zip(ids, replies, strict=True):
            note = None if raw is None else Waiting.from_json(raw)
            if note is not None:
                notes[execution_id] = note
        return notes
