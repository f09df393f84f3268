"""In-process waits for events (the engine's Normal mode, V6)."""

from __future__ import annotations

from typing import Protocol

from plaita.domain.events import Event, EventSubscription


class EventWaiter(Protocol):
    """Lets a flow run in one process wait for its event instead of suspending."""

    async def wait_for_event(
        self, subscription: EventSubscription, timeout_ms: int | None
    ) -> Event | None:
        """Wait in-process for an event matching ``subscription``; None once the timeout passed.

        An event published before the wait began, with the subscription's correlation id,
        counts (V6).
        """
        ...
