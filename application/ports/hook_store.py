"""Inbound webhooks (V10): the hooks created through the admin API, by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from plaita.domain.hooks import HookDefinition


class HookStore(Protocol):
    """The hooks created through the admin API (or the CLI), by name, for the deployment."""

    async def add(self, hook: HookDefinition) -> bool:
        """Store ``hook`` unless a hook has its name; False (nothing changed) when one has."""
        ...

    async def get(self, name: str) -> HookDefinition | None:
        """The hook of this name, or None."""
        ...

    async def list(self) -> Sequence[HookDefinition]:
        """Every stored hook, by name."""
        ...

    async def remove(self, name: str) -> bool:
        """Delete the hook of this name; False when there was none."""
        ...
