"""Index pruning (V7, S1): stores whose indexes outlive the records they point at."""

from __future__ import annotations

from typing import Protocol


class IndexJanitor(Protocol):
    """A store whose indexes keep members of expired records until they are pruned (V7)."""

    async def prune_indexes(self, *, budget: int) -> int:
        """Remove at most ``budget`` dead index members (in Lua batches of <= 500); how many."""
        ...
