"""Tombstones of deleted executions (W13)."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.tombstone import Tombstone


class TombstoneStore(Protocol):
    """Reads the tombstone a delete left."""

    async def get(self, execution_id: str) -> Tombstone | None:
        """The execution's tombstone, if it was deleted (W13)."""
        ...
