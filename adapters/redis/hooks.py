"""Hooks and seen-signature marks on Redis (V10).

Hooks live in one hash (``{ns}:hooks``, name → definition JSON): every write is a single
command on a single key (HSETNX, HDEL), so it is atomic on a Redis Cluster too, and a listing
is one HGETALL. A seen signature is its own key with a TTL (SET NX PX).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as redis

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import text
from plaita.domain.hooks import HookDefinition, dump_hook, load_hook


class RedisHookStore:
    """HookStore on the hash ``{ns}:hooks``."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    async def add(self, hook: HookDefinition) -> bool:
        return bool(await self._client.hsetnx(self._keys.hooks(), hook.name, dump_hook(hook)))

    async def get(self, name: str) -> HookDefinition | None:
        document = await self._client.hget(self._keys.hooks(), name)
        return None if document is None else load_hook(document)

    async def list(self) -> Sequence[HookDefinition]:
        stored = await self._client.hgetall(self._keys.hooks())
        documents = {text(name): document for name, document in stored.items()}
        return [load_hook(documents[name]) for name in sorted(documents)]

    async def remove(self, name: str) -> bool:
        return bool(await self._client.hdel(self._keys.hooks(), name))


class RedisSeenSignatures:
    """SeenSignatures on ``{ns}:hook-seen:{<hook>}:<signature>`` keys with a TTL."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    async def claim(self, hook: str, signature: str, *, ttl_ms: int) -> bool:
        if ttl_ms <= 0:
            raise ValueError(f"a mark's ttl must be a positive number of ms, got {ttl_ms}")
        key = self._keys.hook_seen(hook, signature)
        return bool(await self._client.set(key, "1", nx=True, px=ttl_ms))

    async def release(self, hook: str, signature: str) -> None:
        await self._client.delete(self._keys.hook_seen(hook, signature))
