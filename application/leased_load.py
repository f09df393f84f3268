"""``LeasedLoad`` from a lease manager and an execution store: acquire, then load.

The backends whose lease and checkpoint live apart (the memory twin, SQL, a SQL store beside
Redis leases) take the lease and then read the checkpoint, two calls in that order.
"""

from __future__ import annotations

import contextlib

from plaita.application.ports import ExecutionRepository, LeaseManager
from plaita.domain.execution import ExecutionState
from plaita.domain.lease import Lease


class SequentialLeasedLoad:
    """LeasedLoad as ``leases.acquire`` followed, once granted, by ``executions.load``."""

    def __init__(self, leases: LeaseManager, executions: ExecutionRepository) -> None:
        self._leases = leases
        self._executions = executions

    async def acquire_and_load(
        self, execution_id: str, holder_id: str, *, ttl_ms: int
    ) -> tuple[Lease | None, ExecutionState | None]:
        lease = await self._leases.acquire(execution_id, holder_id, ttl_ms=ttl_ms)
        if lease is None:
            return None, None
        try:
            return lease, await self._executions.load(execution_id)
        except BaseException:
            # Not read: nothing runs under this lease, so it is given back at once rather
            # than left to its TTL (the carrier stays pending for its redelivery).
            with contextlib.suppress(Exception):
                await self._leases.release(lease)
            raise
