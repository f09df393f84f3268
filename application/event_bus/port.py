"""The event bus port: what a bus does, and the handled marks it keeps (V3, V9)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from types import ModuleType
from typing import Protocol

from plaita.application.ports import EventWaiter
from plaita.domain.events import Event, EventSubscription, RetryPolicy

#: A handler takes the event; a sync one runs in a worker thread, an async one on the loop.
EventHandler = Callable[[Event], object]
Sleep = Callable[[float], Awaitable[None]]

DEFAULT_RETRY_POLICY = RetryPolicy()
#: How long ``close()`` waits for dispatches in flight before naming them (V9).
DISPATCH_DRAIN_TIMEOUT_S = 5.0
#: How long ``publish_sync`` waits for the publish and the dispatches it started.
PUBLISH_SYNC_TIMEOUT_S = 5.0


class EventBus(EventWaiter, Protocol):
    """Publish events, wait for them, keep subscriptions and run handlers (V3, V9)."""

    async def start(self) -> None:
        """Bind the bus to the running loop and start its listeners (idempotent).

        ``publish`` and ``wait_for_event`` start the bus themselves; a process that only
        registers handlers calls it so events published elsewhere reach them.
        """
        ...

    async def publish(self, event: Event) -> None:
        """Store the event, keep it in its correlation's inbox, wake matching waits, and
        dispatch it to every matching handler in the background (``close`` drains them).

        Memory dispatches from here; Redis from each process's listener, so handlers of every
        process see it. A handler that already succeeded for this event id is not run again.
        Raises ``EventBusClosedError`` once ``close()`` began.
        """
        ...

    def publish_sync(self, event: Event, *, timeout_s: float = PUBLISH_SYNC_TIMEOUT_S) -> None:
        """``publish`` from synchronous code (a sync task handler, a script).

        On a thread with a running loop it raises ``PublishSyncInLoopError`` (await
        ``publish`` there). When the bus's loop runs on another thread the publish runs there;
        otherwise on a private loop. The memory bus then waits at most ``timeout_s`` for the
        dispatches the publish started, naming stragglers; raises ``PublishSyncTimeoutError``
        when the publish itself does not finish in time.
        """
        ...

    async def register_subscription(self, subscription: EventSubscription) -> None:
        """Store a subscription for the event filter (V4)."""
        ...

    async def unregister_subscription(self, subscription_id: str) -> bool:
        """Remove a subscription; False when there was none."""
        ...

    def register_handler(
        self,
        pattern: str,
        handler: EventHandler,
        *,
        handler_id: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> str:
        """Run ``handler`` for every event whose type matches ``pattern``; its handler id.

        The id defaults to the handler's qualified name; a second registration under one id
        raises ``DuplicateHandlerError``.
        """
        ...

    def unregister_handler(self, handler_id: str) -> bool:
        """Stop dispatching to a handler; False when no handler has this id."""
        ...

    def register_handlers_from(self, source: ModuleType | Iterable[object]) -> list[str]:
        """Register the functions ``@event_handler`` marked in a module (those defined
        there) or in an iterable; their handler ids."""
        ...

    async def get_event(self, event_id: str) -> Event | None:
        """A published event by id, or None (unknown or expired)."""
        ...

    async def close(self) -> None:
        """Shut down per V9 (idempotent). Raises ``CloseFromHandlerError`` from inside one of
        this bus's handlers and ``EventBusCloseError`` when a teardown step failed."""
        ...


class HandledMarks(Protocol):
    """Which handlers already succeeded for which event (the publish dedup of V3)."""

    async def is_handled(self, event_id: str, handler_id: str) -> bool:
        """True once ``handler_id`` succeeded for ``event_id`` (until the mark expires)."""
        ...

    async def mark_handled(self, event_id: str, handler_id: str) -> None:
        """Record that ``handler_id`` succeeded for ``event_id``."""
        ...
