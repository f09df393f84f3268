"""Flow definitions on Redis: one document per (owner, flow_id, version), a latest pointer per
owner and flow, and each owner's set of flow ids."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import FlowOwner


class RedisFlowRepository:
    """FlowRepository on ``…:{<flow_id>}:v:<version>``, ``…:{<flow_id>}:latest``, the flow's
    version set ``…:{<flow_id>}:versions`` and the owner's id set (``RedisKeys.flow_version``,
    ``flow_latest``, ``flow_versions``, ``flows``).

    The version and the latest pointer share the flow's hash tag and are written by one
    script (``flow_put.lua``), so of two concurrent registrations of one version exactly one
    stores; the pointer moves by compare-and-set (``flow_move_latest.lua``), in that slot
    too. The id set lives in another slot and is added to afterwards, also when the version
    was already stored: a crash between the two leaves a version that ``get`` finds and
    ``list_ids`` misses until the same registration is repeated (ADR 0011).
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._put = client.register_script(read_script("flow_put"))
        self._move_latest = client.register_script(read_script("flow_move_latest"))

    async def put_if_absent(self, flow: Flow, *, owner: FlowOwner) -> Flow | None:
        document = json.dumps(flow.to_document(), separators=(",", ":"))
        reply = await self._put(
            keys=[
                self._keys.flow_version(owner, flow.flow_id, flow.version),
                self._keys.flow_latest(owner, flow.flow_id),
                self._keys.flow_versions(owner, flow.flow_id),
            ],
            args=[document, flow.version],
        )
        await self._client.sadd(self._keys.flows(owner), flow.flow_id)
        return None if int(reply[0]) == 1 else Flow.from_json(text(reply[1]))

    async def latest_version(self, flow_id: str, *, owner: FlowOwner) -> str | None:
        latest = await self._client.get(self._keys.flow_latest(owner, flow_id))
        return None if latest is None else text(latest)

    async def move_latest(
        self, flow_id: str, version: str, *, owner: FlowOwner, expected: str | None
    ) -> bool:
        reply = await self._move_latest(
            keys=[
                self._keys.flow_latest(owner, flow_id),
                self._keys.flow_version(owner, flow_id, version),
            ],
            args=[version, "0" if expected is None else "1", expected or ""],
        )
        return int(reply) == 1

    async def get(
        self, flow_id: str, version: str | None = None, *, owner: FlowOwner
    ) -> Flow | None:
        if version is None:
            version = await self.latest_version(flow_id, owner=owner)
            if version is None:
                return None
        document = await self._client.get(self._keys.flow_version(owner, flow_id, version))
        return None if document is None else Flow.from_json(document)

    async def list_ids(self, *, owner: FlowOwner) -> Sequence[str]:
        members = await self._client.smembers(self._keys.flows(owner))
        return sorted(text(flow_id) for flow_id in members)

    async def versions(self, flow_id: str, *, owner: FlowOwner) -> Sequence[str]:
        """The flow's version set, and its latest: a version stored before the set existed
        is listed once it is registered again (or while it is the latest)."""
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.smembers(self._keys.flow_versions(owner, flow_id))
            pipe.get(self._keys.flow_latest(owner, flow_id))
            members, latest = await pipe.execute()
        found = {text(version) for version in members}
        if latest is not None:
            found.add(text(latest))
        return sorted(found)
