"""The worker registry on Redis: one record per instance with a TTL, plus an id set (W16)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs
import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text
from plaita.application.ports import WorkerInstance

_FIELDS = tuple(field.name for field in attrs.fields(WorkerInstance))


class RedisWorkerRegistry:
    """WorkerRegistry on ``{ns}:worker:{<instance_id>}`` (JSON, PX ttl) and ``{ns}:workers``.

    The two keys live in different hash slots, so ``put`` writes them in one non-transactional
    pipeline, not atomically: one round trip on a single node, where the id is added to the
    set first; on a Redis Cluster the two go to their nodes side by side and either may land
    first. Every partial state heals by itself: ``list`` drops ids whose record is missing
    (expired, or not written yet), a record whose id is missing or was dropped is listed again
    at its worker's next heartbeat (every ``put`` adds the id again), and a record whose
    worker died expires with its TTL. What decides (the W5 conflict table) reads the record
    by ``get``; the id set only serves ``list``.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    async def put(self, instance: WorkerInstance, *, ttl_ms: int) -> None:
        if ttl_ms <= 0:
            raise ValueError(f"a registry ttl must be a positive number of ms, got {ttl_ms}")
        record = json.dumps(attrs.asdict(instance), separators=(",", ":"))
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.sadd(self._keys.workers(), instance.instance_id)
            pipe.set(self._keys.worker(instance.instance_id), record, px=ttl_ms)
            await pipe.execute()

    async def get(self, instance_id: str) -> WorkerInstance | None:
        record = await self._client.get(self._keys.worker(instance_id))
        return None if record is None else _instance(record)

    async def list(self) -> Sequence[WorkerInstance]:
        ids = sorted(text(member) for member in await self._client.smembers(self._keys.workers()))
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for instance_id in ids:
                pipe.get(self._keys.worker(instance_id))
            records = await pipe.execute()
        expired = [
            instance_id for instance_id, record in zip(ids, records, strict=True) if record is None
        ]
        if expired:
            await self._client.srem(self._keys.workers(), *expired)
        return [_instance(record) for record in records if record is not None]

    async def remove(self, instance_id: str) -> None:
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.delete(self._keys.worker(instance_id))
            pipe.srem(self._keys.workers(), instance_id)
            await pipe.execute()


def _instance(record: str | bytes) -> WorkerInstance:
    document = json.loads(record)
    return WorkerInstance(**{name: document[name] for name in _FIELDS if name in document})
