"""The lease and the checkpoint read under it, in that order (W3, S1).

A worker step takes an execution's lease and then reads its checkpoint: the read must come
after the grant, or it could miss the last save of the holder that just let go. A backend
that can do both in one round trip (Redis: one script in the execution's slot) offers it
here; the others run ``LeaseManager.acquire`` and then ``ExecutionRepository.load``
(``application.leased_load.SequentialLeasedLoad``).
"""

from __future__ import annotations

from typing import Protocol

from plaita.domain.execution import ExecutionState
from plaita.domain.lease import Lease


class LeasedLoad(Protocol):
    """Take an execution's lease, then read its checkpoint under it."""

    async def acquire_and_load(
        self, execution_id: str, holder_id: str, *, ttl_ms: int
    ) -> tuple[Lease | None, ExecutionState | None]:
        """The new lease and the checkpoint read after it; (None, None) if another holds it.

        A read that fails after the grant gives the lease back (best effort) and raises."""
        ...
