"""Dead-letter replay markers (W10): each dead letter is replayed once while its marker lasts."""

from __future__ import annotations

from typing import Protocol


class ReplayMarkerStore(Protocol):
    """The one-time replay marker of a dead letter (W10)."""

    async def claim(self, dlq_key: str, dlq_id: str, value: str, *, ttl_ms: int) -> bool:
        """Set the marker to ``value`` if it is absent (SET NX PX); False when it was set."""
        ...

    async def release(self, dlq_key: str, dlq_id: str, value: str) -> bool:
        """Delete the marker if it still holds ``value``; False when it holds something else."""
        ...

    async def get(self, dlq_key: str, dlq_id: str) -> str | None:
        """The marker's value while it lasts, or None."""
        ...
