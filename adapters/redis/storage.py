"""Execution checkpoints on Redis, written under the fence in one Lua script (S1, W4)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as redis
from redis.exceptions import NoScriptError

from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.streams import text
from plaita.domain.execution import ExecutionState, ExecutionStatus
from plaita.domain.lease import check_fence

_LIST_PAGE = 100


class RedisExecutionRepository:
    """ExecutionRepository on ``…:state`` plus the ``{ns}:executions`` index (by updated_at)."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._save = client.register_script(read_script("execution_save"))

    async def load(self, execution_id: str) -> ExecutionState | None:
        document = await self._client.get(self._keys.execution_state(execution_id))
        return None if document is None else ExecutionState.from_json(json.loads(document))

    async def save(self, state: ExecutionState, *, fence: int) -> None:
        payload = json.dumps(state.to_json(), separators=(",", ":"))
        try:
            current = await self._fenced_write(state, fence, payload)
        except NoScriptError:
            # This server has not seen the script yet (first save, restart, failover).
            await self._client.script_load(self._save.script)
            current = await self._fenced_write(state, fence, payload)
        check_fence(state.execution_id, fence, current)

    async def _fenced_write(self, state: ExecutionState, fence: int, payload: str) -> int | None:
        """Run the fenced save and the index update in one round trip; the current generation.

        The index lives in another hash slot, so it cannot join the script. It is advisory:
        ``list`` skips ids that have no state, so an entry left by a rejected save is harmless.
        """
        execution_id = state.execution_id
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.evalsha(
                self._save.sha,
                2,
                self._keys.fence_generation(execution_id),
                self._keys.execution_state(execution_id),
                fence,
                payload,
            )
            pipe.zadd(self._keys.executions(), {execution_id: state.updated_at_ms})
            current, indexed = await pipe.execute(raise_on_error=False)
        for reply in (current, indexed):
            if isinstance(reply, Exception):
                raise reply
        return None if current is None else int(text(current))

    async def list(
        self,
        *,
        flow_id: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 100,
    ) -> Sequence[ExecutionState]:
        found: list[ExecutionState] = []
        start = 0
        page = limit if flow_id is None and status is None else max(limit, _LIST_PAGE)
        while len(found) < limit:
            ids = await self._client.zrevrange(self._keys.executions(), start, start + page - 1)
            if not ids:
                break
            documents = await self._client.mget(
                [self._keys.execution_state(text(execution_id)) for execution_id in ids]
            )
            for document in documents:
                if document is None:
                    continue
                state = ExecutionState.from_json(json.loads(document))
                if (flow_id is None or state.flow_id == flow_id) and (
                    status is None or state.status is status
                ):
                    found.append(state)
            start += page
        return found[:limit]
