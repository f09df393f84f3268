"""Inbound webhooks (V10): the value of a hook's secret, wherever it is kept."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.hooks import HookSecret


class HookSecrets(Protocol):
    """The value of a hook's secret, wherever it is kept."""

    async def resolve(self, secret: HookSecret) -> bytes | None:
        """The secret's bytes, or None when it does not resolve here.

        None: an unset variable, an unreadable file, or fewer than 16 characters.
        """
        ...
