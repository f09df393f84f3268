"""Flow definitions on Redis: one document per (flow_id, version) and a latest pointer."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text
from plaita.domain.flow import Flow


class RedisFlowRepository:
    """FlowRepository on ``{ns}:flow:{<flow_id>}:v:<version>``, ``…:latest`` and ``{ns}:flows``."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    async def put(self, flow: Flow) -> None:
        document = json.dumps(flow.to_document(), separators=(",", ":"))
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.set(self._keys.flow_version(flow.flow_id, flow.version), document)
            pipe.set(self._keys.flow_latest(flow.flow_id), flow.version)
            pipe.sadd(self._keys.flows(), flow.flow_id)
            await pipe.execute()

    async def get(self, flow_id: str, version: str | None = None) -> Flow | None:
        if version is None:
            latest = await self._client.get(self._keys.flow_latest(flow_id))
            if latest is None:
                return None
            version = text(latest)
        document = await self._client.get(self._keys.flow_version(flow_id, version))
        return None if document is None else Flow.from_json(document)

    async def list_ids(self) -> Sequence[str]:
        return sorted(text(flow_id) for flow_id in await self._client.smembers(self._keys.flows()))
