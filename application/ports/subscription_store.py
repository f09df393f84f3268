"""Event subscriptions (V1-V4, V7), indexed by type, correlation and execution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from plaita.domain.events import EventSubscription, SubscriptionQuery


class SubscriptionStore(Protocol):
    """What suspended executions wait for, found by the event filter in one round trip."""

    async def add(self, subscription: EventSubscription) -> None:
        """Store a subscription and index it by event type and execution."""
        ...

    async def remove(self, subscription_id: str) -> bool:
        """Delete a subscription and its index entries; False if it did not exist."""
        ...

    async def get(self, subscription_id: str) -> EventSubscription | None:
        """A subscription by id, or None."""
        ...

    async def find(self, event_type: str) -> Sequence[EventSubscription]:
        """Every subscription for ``event_type`` (matching beyond the type is the domain's)."""
        ...

    async def find_for_event(
        self, event_type: str, correlation_id: str | None
    ) -> Sequence[EventSubscription]:
        """The only subscriptions an event can match, oldest first (V4).

        Of ``event_type`` and either waiting on ``correlation_id`` or on no correlation at
        all. Read through the correlation index and a per-type index of uncorrelated
        subscriptions, so the cost does not grow with the type's other waits.
        """
        ...

    async def list(self, query: SubscriptionQuery) -> Sequence[EventSubscription]:
        """Subscriptions matching every field the query names (AND), oldest first (V7).

        Candidates come from the most selective index the query names
        (``choose_subscription_index``), fetched in one round trip; every filter is then
        applied to them. At most ``query.limit``.
        """
        ...
