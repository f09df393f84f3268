"""LeasedLoad on Redis: the lease and the checkpoint read in one script (W3, S1, P4).

``lease_acquire_load.lua`` takes the lease exactly as ``RedisLeaseManager.acquire`` does
(the same ``take_lease``) and, when it is granted, reads the execution's three hashes in the
same script: one round trip instead of two, and the read is after the grant by construction.
Every key is the execution's (one hash tag), so the script runs on a Redis Cluster as well.
"""

from __future__ import annotations

import contextlib

import redis.asyncio as redis

from plaita.adapters.redis.execution_index import assemble_read, checkpoint_keys
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.lease import RedisLeaseManager, check_ttl
from plaita.adapters.redis.scripts import read_script
from plaita.adapters.redis.tick_pipeline import tick_pipeline
from plaita.domain.execution import ExecutionState
from plaita.domain.lease import Lease


class RedisLeasedLoad:
    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._keys = keys
        self._script = client.register_script(read_script("lease_acquire_load"))
        self._leases = RedisLeaseManager(client, keys)
        self._tick = tick_pipeline(client)

    async def acquire_and_load(
        self, execution_id: str, holder_id: str, *, ttl_ms: int
    ) -> tuple[Lease | None, ExecutionState | None]:
        check_ttl(ttl_ms)
        keys = [
            self._keys.lease(execution_id),
            self._keys.fence_generation(execution_id),
            *checkpoint_keys(self._keys, execution_id),
        ]
        reply = await self._tick.script(self._script, keys=keys, args=[holder_id, ttl_ms])
        if reply is None:
            return None, None
        generation, checkpoint = reply
        lease = Lease(execution_id=execution_id, holder_id=holder_id, generation=int(generation))
        try:
            return lease, assemble_read(checkpoint)
        except Exception:
            # A checkpoint that cannot be read: nothing runs under this lease, so it is given
            # back at once rather than left to its TTL.
            with contextlib.suppress(Exception):
                await self._leases.release(lease)
            raise
