"""Execution leases (W3, W4): one holder at a time, each grant a new fence generation."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.lease import Lease


class LeaseManager(Protocol):
    """Who may advance an execution now; the generation fences every later write."""

    async def acquire(self, execution_id: str, holder_id: str, *, ttl_ms: int) -> Lease | None:
        """Take the lease with a new fence generation; None if another holder has it (W3)."""
        ...

    async def renew(self, lease: Lease, *, ttl_ms: int) -> bool:
        """Extend the lease if it is still ours; False when it was lost."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Give the lease up if it is still ours; False when it was already gone."""
        ...

    async def holder(self, execution_id: str) -> Lease | None:
        """Who holds the lease now, or None."""
        ...

    async def current_generation(self, execution_id: str) -> int | None:
        """The last generation handed out (never reset), or None if never acquired."""
        ...
