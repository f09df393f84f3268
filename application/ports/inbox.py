"""The inbox (V6): events kept per correlation for waits that begin later."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from plaita.domain.events import Event, InboxEntry


class Inbox(Protocol):
    """Events kept per (tenant, correlation id) for waits that begin later (V6)."""

    async def add(self, event: Event) -> None:
        """Keep ``event`` in its correlation's inbox (TTL only extends); no-op without one."""
        ...

    async def entries(
        self, tenant_id: str, correlation_id: str, execution_id: str
    ) -> Sequence[InboxEntry]:
        """The inbox's events, each with the subscription of ``execution_id`` that took it.

        None where no subscription of it took the event; one round trip.
        """
        ...

    async def take(
        self,
        tenant_id: str,
        correlation_id: str,
        execution_id: str,
        event_id: str,
        subscription_id: str,
    ) -> str:
        """Let ``subscription_id`` take ``event_id`` unless one did; the one that holds it.

        Set-if-absent, atomic: for ``execution_id``, the first subscription to take an event
        keeps it.
        """
        ...
