"""An in-process event bus for Normal-mode waits: publish, and wait with a timeout (E6, V6).

Events with a correlation id are also kept in that correlation's inbox, so a wait that begins
after the event was published still receives it. Each event is delivered to at most one wait.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque

from plaita.domain.errors import UnboundedWaitError
from plaita.domain.events import Event, EventSubscription, subscription_matches

#: Events kept per correlation id for waits that have not begun yet.
INBOX_LIMIT = 1000


class MemoryEventBus:
    def __init__(self, *, closed: bool = False, inbox_limit: int = INBOX_LIMIT) -> None:
        #: A closed bus gets no events after its waits begin (``plaita run``): a wait without
        #: a timeout and without a matching event in its inbox could only hang, so it fails.
        self._closed = closed
        self._inbox: defaultdict[str | None, deque[Event]] = defaultdict(
            lambda: deque(maxlen=inbox_limit)
        )
        self._waiting: list[tuple[EventSubscription, asyncio.Future[Event]]] = []

    async def publish(self, event: Event) -> None:
        """Hand the event to the first matching wait, or keep it in its inbox."""
        for index, (subscription, future) in enumerate(self._waiting):
            if not future.done() and subscription_matches(subscription, event):
                del self._waiting[index]
                future.set_result(event)
                return
        self._inbox[event.correlation_id].append(event)

    async def wait_for_event(
        self, subscription: EventSubscription, timeout_ms: int | None
    ) -> Event | None:
        inbox = self._inbox[subscription.correlation_id]
        for event in list(inbox):
            if subscription_matches(subscription, event):
                inbox.remove(event)
                return event
        if self._closed and timeout_ms is None:
            raise UnboundedWaitError(
                f"node {subscription.node_id!r} waits for {subscription.event_type!r} without a "
                "timeout and no such event was given; pass --event "
                f"'{subscription.event_type}={{...}}', give the node a timeout, or run the flow "
                "on a worker"
            )
        future: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        entry = (subscription, future)
        self._waiting.append(entry)
        try:
            return await asyncio.wait_for(future, None if timeout_ms is None else timeout_ms / 1000)
        except TimeoutError:
            return None
        finally:
            if entry in self._waiting:
                self._waiting.remove(entry)
