"""Inbound webhooks (V10): the replay guard, signatures accepted within their window."""

from __future__ import annotations

from typing import Protocol


class SeenSignatures(Protocol):
    """The replay guard: signatures accepted within their window (SET NX PX)."""

    async def claim(self, hook: str, signature: str, *, ttl_ms: int) -> bool:
        """Mark ``signature`` as seen for ``ttl_ms``; False when it is marked already."""
        ...

    async def release(self, hook: str, signature: str) -> None:
        """Forget the mark (its delivery failed, so the sender may try it again)."""
        ...
