"""The injected id generator (deterministic in tests)."""

from __future__ import annotations

from typing import Protocol


class IdGenerator(Protocol):
    """Where every new execution, event, subscription and carrier id comes from."""

    def new_id(self) -> str:
        """A fresh, globally unique id."""
        ...
