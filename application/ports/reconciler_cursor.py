"""The event reconciler's cursor (V5)."""

from __future__ import annotations

from typing import Protocol


class ReconcilerCursor(Protocol):
    """Where the event reconciler stopped: the end of its last completely replayed window (V5)."""

    async def get(self) -> int | None:
        """The stored cursor in epoch milliseconds, or None before the first successful round."""
        ...

    async def set(self, cursor_ms: int) -> None:
        """Store ``cursor_ms`` unless the stored cursor is already later (never moves back)."""
        ...
