"""The in-process event bus: publish, wait with a timeout, handlers, close (E6, V3, V6, V9).

Events with a correlation id are also kept in that correlation's inbox, so a wait that begins
after the event was published still receives it. Each event is delivered to at most one wait.
Handlers run as background tasks on the publisher's loop (``HandlerDispatcher``); the bus
keeps no state that binds it to one loop, so ``plaita run`` may publish on one
``asyncio.run`` and wait on the next.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, defaultdict, deque
from collections.abc import Sequence

from plaita.adapters.memory.subscriptions import MemorySubscriptionStore
from plaita.application.event_bus import (
    DISPATCH_DRAIN_TIMEOUT_S,
    PUBLISH_SYNC_TIMEOUT_S,
    BusRegistrations,
    BusShutdown,
    HandledMarks,
    HandlerDispatcher,
    HandlerResult,
    OwnedResource,
    Sleep,
    TeardownStep,
    publish_from_sync_code,
    release_steps,
)
from plaita.application.ports import SubscriptionStore
from plaita.domain.errors import EventBusClosedError, UnboundedWaitError
from plaita.domain.events import Event, EventSubscription, subscription_matches

#: Events kept per correlation id for waits that have not begun yet.
INBOX_LIMIT = 1000
#: Events ``get_event`` remembers; the oldest are forgotten first.
EVENT_LIMIT = 10_000
#: Handled marks remembered; a mark forgotten only lets a re-publish run a handler again.
HANDLED_MARK_LIMIT = 100_000


class MemoryHandledMarks:
    """HandledMarks in a bounded dict (insertion order = age); gone with the process."""

    def __init__(self, limit: int = HANDLED_MARK_LIMIT) -> None:
        self._limit = limit
        self._marks: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def is_handled(self, event_id: str, handler_id: str) -> bool:
        return (event_id, handler_id) in self._marks

    async def mark_handled(self, event_id: str, handler_id: str) -> None:
        self._marks[(event_id, handler_id)] = None
        while len(self._marks) > self._limit:
            self._marks.popitem(last=False)


class MemoryEventBus(BusRegistrations):
    """EventBus and EventWaiter in one process.

    ``closed=True`` is not ``close()``: it describes a bus nothing will publish to once the
    waits begin (``plaita run``), where a wait without a timeout and without a matching event
    in its inbox could only hang, so it fails with ``UnboundedWaitError``.
    """

    def __init__(
        self,
        *,
        closed: bool = False,
        inbox_limit: int = INBOX_LIMIT,
        event_limit: int = EVENT_LIMIT,
        subscriptions: SubscriptionStore | None = None,
        marks: HandledMarks | None = None,
        sleep: Sleep = asyncio.sleep,
        drain_timeout_s: float = DISPATCH_DRAIN_TIMEOUT_S,
        resources: Sequence[OwnedResource] = (),
    ) -> None:
        self._no_later_events = closed
        self._inbox: defaultdict[str | None, deque[Event]] = defaultdict(
            lambda: deque(maxlen=inbox_limit)
        )
        self._waiting: list[tuple[EventSubscription, asyncio.Future[Event]]] = []
        self._events: OrderedDict[str, Event] = OrderedDict()
        self._event_limit = event_limit
        self._subscriptions = MemorySubscriptionStore() if subscriptions is None else subscriptions
        self._dispatcher = HandlerDispatcher(
            MemoryHandledMarks() if marks is None else marks, sleep=sleep
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown = BusShutdown(
            self._dispatcher,
            [TeardownStep("waits", self._end_waits), *release_steps(resources)],
            bus_name="MemoryEventBus",
            drain_timeout_s=drain_timeout_s,
        )

    @property
    def dispatcher(self) -> HandlerDispatcher:
        """The handler dispatcher (its ``failures`` list the handlers that gave up)."""
        return self._dispatcher

    @property
    def listening(self) -> bool:
        """The memory bus has no background listener; publish dispatches directly."""
        return False

    async def start(self) -> None:
        self._shutdown.check_open("start")
        self._bind_loop()

    async def publish(self, event: Event) -> None:
        """Keep the event, hand it to the first matching wait or its inbox, dispatch handlers."""
        await self._publish(event)

    async def _publish(self, event: Event) -> list[asyncio.Task[HandlerResult]]:
        self._shutdown.check_open(f"publish of event {event.event_id!r}")
        self._bind_loop()
        self._remember(event)
        self._deliver(event)
        return self._dispatcher.dispatch(event)

    def publish_sync(self, event: Event, *, timeout_s: float = PUBLISH_SYNC_TIMEOUT_S) -> None:
        home = self._loop
        on_home = home is not None and home.is_running() and not home.is_closed()
        left = (
            "left to finish on the bus loop (not cancelled)"
            if on_home
            else "cancelled when publish_sync's private loop ends"
        )

        async def publish_and_settle() -> None:
            started = await self._publish(event)
            await self._dispatcher.wait_for(started, timeout_s, during="publish_sync", left=left)

        publish_from_sync_code(
            home, publish_and_settle, event_id=event.event_id, timeout_s=timeout_s
        )

    async def get_event(self, event_id: str) -> Event | None:
        self._shutdown.check_open(f"get_event {event_id!r}")
        return self._events.get(event_id)

    async def wait_for_event(
        self, subscription: EventSubscription, timeout_ms: int | None
    ) -> Event | None:
        self._shutdown.check_open(f"wait_for_event {subscription.subscription_id!r}")
        self._bind_loop()
        inbox = self._inbox[subscription.correlation_id]
        for event in list(inbox):
            if subscription_matches(subscription, event):
                inbox.remove(event)
                return event
        if self._no_later_events and timeout_ms is None:
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

    async def close(self) -> None:
        await self._shutdown.close()

    # internals

    def _bind_loop(self) -> None:
        # The loop publish_sync hands work to from other threads: the latest one used.
        self._loop = asyncio.get_running_loop()

    def _remember(self, event: Event) -> None:
        self._events[event.event_id] = event
        self._events.move_to_end(event.event_id)
        while len(self._events) > self._event_limit:
            self._events.popitem(last=False)

    def _deliver(self, event: Event) -> None:
        for index, (subscription, future) in enumerate(self._waiting):
            if not future.done() and subscription_matches(subscription, event):
                del self._waiting[index]
                _settle(future, event)
                return
        inbox = self._inbox[event.correlation_id]
        # A re-published event is kept once: a later wait must not take it twice.
        if all(kept.event_id != event.event_id for kept in inbox):
            inbox.append(event)

    async def _end_waits(self) -> None:
        waiting, self._waiting = self._waiting, []
        for subscription, future in waiting:
            _settle(
                future,
                EventBusClosedError(
                    f"the bus closed while subscription {subscription.subscription_id!r} "
                    f"waited for {subscription.event_type!r}"
                ),
            )


def _settle(future: asyncio.Future[Event], outcome: Event | BaseException) -> None:
    """Resolve a wait's future from whichever loop or thread the publisher runs on."""

    def settle() -> None:
        if future.done():
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    loop = future.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        settle()
    elif not loop.is_closed():
        loop.call_soon_threadsafe(settle)
