"""What every bus registers the same way: subscriptions and handlers (V3, V9)."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

from plaita.application.event_bus.dispatch import HandlerDispatcher
from plaita.application.event_bus.port import DEFAULT_RETRY_POLICY, EventHandler
from plaita.application.event_bus.shutdown import BusShutdown
from plaita.application.ports import SubscriptionStore
from plaita.domain.events import EventSubscription, RetryPolicy


class BusRegistrations:
    """What every bus does the same way: subscriptions through the store, handlers through
    the dispatcher, each refused once the bus is closing (V3, V9). Backends set the three
    attributes in their ``__init__``."""

    _subscriptions: SubscriptionStore
    _dispatcher: HandlerDispatcher
    _shutdown: BusShutdown

    async def register_subscription(self, subscription: EventSubscription) -> None:
        self._shutdown.check_open(f"register_subscription {subscription.subscription_id!r}")
        await self._subscriptions.add(subscription)

    async def unregister_subscription(self, subscription_id: str) -> bool:
        self._shutdown.check_open(f"unregister_subscription {subscription_id!r}")
        return await self._subscriptions.remove(subscription_id)

    def register_handler(
        self,
        pattern: str,
        handler: EventHandler,
        *,
        handler_id: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> str:
        return self._dispatcher.register(pattern, handler, handler_id=handler_id, retry=retry)

    def unregister_handler(self, handler_id: str) -> bool:
        return self._dispatcher.unregister(handler_id)

    def register_handlers_from(self, source: ModuleType | Iterable[object]) -> list[str]:
        return self._dispatcher.register_declared(source)
