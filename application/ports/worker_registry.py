"""The worker registry (W16): one expiring record per worker instance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs


@attrs.frozen
class WorkerInstance:
    """A worker's registry record: its status, last heartbeat and config generations."""

    instance_id: str
    status: str
    heartbeat_ms: int
    started_ms: int
    config_family: str = ""
    config_generation: str = ""
    budget_generation: str = ""


class WorkerRegistry(Protocol):
    """Which workers are alive, for lease conflicts (W5) and operators (C1)."""

    async def put(self, instance: WorkerInstance, *, ttl_ms: int) -> None:
        """Write the instance record (status + heartbeat) with a TTL (W16)."""
        ...

    async def get(self, instance_id: str) -> WorkerInstance | None:
        """One instance, or None when it never registered or its record expired."""
        ...

    async def list(self) -> Sequence[WorkerInstance]:
        """Every registered instance."""
        ...

    async def remove(self, instance_id: str) -> None:
        """Delete the record (a closed worker)."""
        ...
