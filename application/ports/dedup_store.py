"""Start dedup keys (W6): one execution per key while the key lasts."""

from __future__ import annotations

from typing import Protocol

import attrs


@attrs.frozen
class DedupClaim:
    """The execution a start dedup key already names, and what is known of its start (W6)."""

    execution_id: str
    #: How long ago the key was claimed (from its remaining TTL), None when unknown.
    age_ms: int | None
    #: The claimer confirmed that the start carrier was enqueued (``confirm``).
    carrier_enqueued: bool


class DedupStore(Protocol):
    """Claims of start dedup keys, confirmed once the start carrier exists."""

    async def claim(
        self, key: str, execution_id: str, *, tenant_id: str, ttl_ms: int
    ) -> DedupClaim | None:
        """Claim ``key`` for ``execution_id`` (SET NX); None when claimed now, else who holds it.

        ``age_ms`` is measured against ``ttl_ms``: every claim of a key uses one TTL.
        """
        ...

    async def confirm(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        """Record that ``execution_id``'s start carrier exists; False when the key moved on.

        Called after its enqueue. An unconfirmed claim is an orphan once it is old (W6).
        """
        ...

    async def release(self, key: str, execution_id: str, *, tenant_id: str) -> bool:
        """Drop the claim if ``execution_id`` still holds it (an orphan, a deleted execution)."""
        ...
