"""The event bus on Redis: the composed event ports plus a listener on the notification stream
(V3, V6, V9; ADR 0006).

Publishing writes the inbox, then the event record and, once it is stored, its notification
(``EventLog.append``), exactly like ``PublishEvent``. Every bus instance runs one listener
that reads the notification stream with plain XREAD (no consumer group), so every process
sees every event, whoever appended it: it wakes this process's ``wait_for_event`` calls and
dispatches to this process's handlers. Handled marks (``SET NX`` with a TTL, written after a
handler succeeded; ``handled_marks``) keep a re-published event from running a handler that
already succeeded for it.

With P > 1 partitions (``--partitions``) the notification stream is P streams, each its own
hash tag (``RedisEventLog``); a multi-stream XREAD must stay in one slot on a cluster, so the
listener is P reads side by side, one blocking XREAD per partition, each with its own
position.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import attrs
import redis.asyncio as redis

from plaita.adapters.redis.connections import (
    TRANSIENT_ERRORS,
    close_client,
    drop_idle_connections,
)
from plaita.adapters.redis.handled_marks import RedisHandledMarks
from plaita.adapters.redis.keys import RedisKeys
from plaita.adapters.redis.streams import entries_of_read, text, text_fields, undecoded
from plaita.application.event_bus import (
    DISPATCH_DRAIN_TIMEOUT_S,
    PUBLISH_SYNC_TIMEOUT_S,
    BusRegistrations,
    BusShutdown,
    HandledMarks,
    HandlerDispatcher,
    OwnedResource,
    Sleep,
    TeardownStep,
    publish_from_sync_code,
    release_steps,
)
from plaita.application.ports import EventLog, Inbox, SubscriptionStore
from plaita.domain.errors import EventBusClosedError
from plaita.domain.events import (
    Event,
    EventSubscription,
    pick_inbox_event,
    subscription_matches,
)
from plaita.domain.partitions import DEFAULT_PARTITIONS, check_partitions

log = logging.getLogger("plaita.events.bus")

#: How long one XREAD blocks; bounds how late the listener notices a cancelled read.
LISTENER_BLOCK_MS = 1000
LISTENER_STOP_TIMEOUT_S = 5.0
# The notification entry's field (ADR 0002): the id of the stored event record.
_EVENT_ID_FIELD = "event_id"
_LISTENER_BACKOFF_S = (0.1, 5.0)
_READ_BATCH = 100


class NotificationError(Exception):
    """The event a notification names could not be loaded (internal to the listener)."""

    def __init__(self, message_id: str, event_id: str) -> None:
        super().__init__(f"event {event_id!r} of notification {message_id} could not be loaded")
        self.message_id = message_id
        self.event_id = event_id


@attrs.define(eq=False)
class _Wait:
    subscription: EventSubscription
    events: asyncio.Queue[Event | EventBusClosedError] = attrs.field(factory=asyncio.Queue)
    exited: asyncio.Event = attrs.field(factory=asyncio.Event)


class RedisEventBus(BusRegistrations):
    """EventBus on Redis, composed of the event ports it is given and its own listener.

    ``client`` (a ``Redis`` or a ``RedisCluster``) serves the listener and the handled marks;
    ``owns_client=True`` hands it to the bus, which then closes it and its connection pool (a
    cluster client's: every node's) in ``close()`` (a client shared with other adapters is
    left open). ``resources`` are further things the bus owns and releases
    at close, before the client.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        *,
        events: EventLog,
        subscriptions: SubscriptionStore,
        inbox: Inbox,
        owns_client: bool = False,
        marks: HandledMarks | None = None,
        sleep: Sleep = asyncio.sleep,
        drain_timeout_s: float = DISPATCH_DRAIN_TIMEOUT_S,
        listener_block_ms: int = LISTENER_BLOCK_MS,
        listener_stop_timeout_s: float = LISTENER_STOP_TIMEOUT_S,
        resources: Sequence[OwnedResource] = (),
        partitions: int = DEFAULT_PARTITIONS,
    ) -> None:
        """``partitions`` must be the event log's (the deployment's ``--partitions``)."""
        if listener_block_ms <= 0:
            raise ValueError(f"listener_block_ms must be > 0, got {listener_block_ms}")
        self._client = client
        layout = [None] if check_partitions(partitions) == 1 else list(range(partitions))
        self._streams = [keys.event_notifications(k) for k in layout]
        self._events = events
        self._subscriptions = subscriptions
        self._inbox = inbox
        self._owns_client = owns_client
        self._dispatcher = HandlerDispatcher(
            RedisHandledMarks(client, keys) if marks is None else marks, sleep=sleep
        )
        self._block_ms = listener_block_ms
        self._listener_stop_timeout_s = listener_stop_timeout_s
        self._drain_timeout_s = drain_timeout_s
        self._waits: set[_Wait] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: asyncio.Task[None] | None = None
        self._listeners: list[asyncio.Task[None]] = []
        self._stopping = False
        steps = [
            TeardownStep("waits", self._end_waits),
            TeardownStep("listener", self._stop_listener),
            *release_steps(resources),
        ]
        if owns_client:
            steps.append(TeardownStep("client", self._close_client))
        self._shutdown = BusShutdown(
            self._dispatcher, steps, bus_name="RedisEventBus", drain_timeout_s=drain_timeout_s
        )

    @property
    def dispatcher(self) -> HandlerDispatcher:
        """The handler dispatcher (its ``failures`` list the handlers that gave up)."""
        return self._dispatcher

    @property
    def listening(self) -> bool:
        """True while the notification listener runs (its read of every partition)."""
        return bool(self._listeners) and not any(task.done() for task in self._listeners)

    async def start(self) -> None:
        """Start the listener at each partition's current end (idempotent, concurrency-safe)."""
        self._shutdown.check_open("start")
        starting = self._starting
        if starting is None or (
            starting.done() and (starting.cancelled() or starting.exception() is not None)
        ):
            starting = asyncio.get_running_loop().create_task(self._start())
            starting.add_done_callback(_retrieve)
            self._starting = starting
        await asyncio.shield(starting)

    async def _start(self) -> None:
        # The listener starts after each stream's last entry, read here: an XREAD from `$`
        # issued later by the task would miss what is published in between.
        starts = []
        for stream in self._streams:
            newest = await undecoded(self._client, "XREVRANGE", stream, "+", "-", "COUNT", 1)
            starts.append(text(newest[0][0]) if newest else "0-0")
        self._loop = asyncio.get_running_loop()
        self._listeners = [
            self._loop.create_task(self._listen(stream, after), name=f"plaita-bus-listener-{k}")
            for k, (stream, after) in enumerate(zip(self._streams, starts, strict=True))
        ]

    async def publish(self, event: Event) -> None:
        self._shutdown.check_open(f"publish of event {event.event_id!r}")
        await self.start()
        await self._publish(event)

    async def _publish(self, event: Event) -> None:
        self._shutdown.check_open(f"publish of event {event.event_id!r}")
        # Inbox first (as PublishEvent): a wait registered in between finds it there, one
        # registered earlier receives the notification.
        await self._inbox.add(event)
        await self._events.append(event)

    def publish_sync(self, event: Event, *, timeout_s: float = PUBLISH_SYNC_TIMEOUT_S) -> None:
        """``publish`` from synchronous code; handlers run later, on the listeners.

        Without a running bus loop the publish runs on a private loop and the connections it
        opened on this client are dropped before that loop ends (redis-py connections belong
        to the loop that opened them). Give the event log and inbox this same client, or
        start the bus first, so theirs are not left bound to a closed loop.
        """
        publish_from_sync_code(
            self._loop,
            lambda: self._publish(event),
            event_id=event.event_id,
            timeout_s=timeout_s,
            after_private_loop=self._drop_private_loop_connections,
        )

    async def get_event(self, event_id: str) -> Event | None:
        self._shutdown.check_open(f"get_event {event_id!r}")
        return await self._events.get(event_id)

    async def wait_for_event(
        self, subscription: EventSubscription, timeout_ms: int | None
    ) -> Event | None:
        """Register the subscription, look in the inbox, then wait for a notification (V6).

        The in-process wait is registered before the inbox is read, so an event published in
        between is either in the inbox or delivered by the listener. An event with a
        correlation id is taken through ``Inbox.take``: it ends at most one wait of this
        execution. The subscription is unregistered on every exit.
        """
        self._shutdown.check_open(f"wait_for_event {subscription.subscription_id!r}")
        await self.start()
        wait = _Wait(subscription)
        await self._subscriptions.add(subscription)
        self._waits.add(wait)
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                early = await self._from_inbox(subscription)
                if early is not None:
                    return early
                while True:
                    delivered = await wait.events.get()
                    if isinstance(delivered, EventBusClosedError):
                        raise delivered
                    if await self._take(subscription, delivered):
                        return delivered
        except TimeoutError:
            return None
        finally:
            self._waits.discard(wait)
            try:
                await self._subscriptions.remove(subscription.subscription_id)
            except Exception as exc:
                log.warning(
                    "event=event_bus.unregister_failed subscription_id=%s error=%r — the "
                    "event filter drops it once its execution ends",
                    subscription.subscription_id,
                    exc,
                )
            wait.exited.set()

    async def _from_inbox(self, subscription: EventSubscription) -> Event | None:
        if subscription.correlation_id is None:
            return None
        while True:
            entries = await self._inbox.entries(
                subscription.tenant_id, subscription.correlation_id, subscription.execution_id
            )
            event = pick_inbox_event(subscription, entries)
            if event is None:
                return None
            if await self._take(subscription, event):
                return event
            # Another wait of this execution took it between the read and the take: the
            # next read shows it as taken, so this loop ends.

    async def _take(self, subscription: EventSubscription, event: Event) -> bool:
        if event.correlation_id is None:
            return True
        holder = await self._inbox.take(
            event.tenant_id,
            event.correlation_id,
            subscription.execution_id,
            event.event_id,
            subscription.subscription_id,
        )
        return holder == subscription.subscription_id

    async def close(self) -> None:
        await self._shutdown.close()

    # the listener

    async def _listen(self, stream: str, after: str) -> None:
        """Read one partition's stream from ``after`` on, until cancelled."""
        backoff = _LISTENER_BACKOFF_S[0]
        this = asyncio.current_task()
        while True:
            # A client may swallow the cancellation of a read in flight and return an empty
            # reply (fakeredis does): without this check the listener would read on forever.
            if self._stopping or (this is not None and this.cancelling()):
                raise asyncio.CancelledError
            try:
                reply = await undecoded(
                    self._client,
                    "XREAD",
                    "COUNT",
                    _READ_BATCH,
                    "BLOCK",
                    self._block_ms,
                    "STREAMS",
                    stream,
                    after,
                )
                for message_id, fields in entries_of_read(reply):
                    event_id = text_fields(fields).get(_EVENT_ID_FIELD)
                    if event_id is not None:
                        await self._on_notification(message_id, event_id)
                    after = message_id
            except asyncio.CancelledError:
                raise
            except NotificationError as exc:
                after = exc.message_id
                log.error(
                    "event=event_bus.notification_failed event_id=%s error=%r — skipped: this "
                    "process's handlers and waits miss it; publish it again once fixed",
                    exc.event_id,
                    exc.__cause__,
                )
            except Exception as exc:
                log.warning(
                    "event=event_bus.listener_error stream=%s after=%s error=%r retry_in_s=%s — "
                    "it reads again from the first notification it has not handled",
                    stream,
                    after,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _LISTENER_BACKOFF_S[1])
            else:
                backoff = _LISTENER_BACKOFF_S[0]

    async def _on_notification(self, message_id: str, event_id: str) -> None:
        if not self._waits and not self._dispatcher.has_handlers:
            return
        try:
            event = await self._events.get(event_id)
        except TRANSIENT_ERRORS:
            raise  # the listener reads this notification again after its backoff
        except Exception as exc:
            # One unreadable record must not stop the listener for every later event.
            raise NotificationError(message_id, event_id) from exc
        if event is None:
            log.info("event=event_bus.event_missing event_id=%s (expired or deleted)", event_id)
            return
        for wait in list(self._waits):
            if subscription_matches(wait.subscription, event):
                wait.events.put_nowait(event)
        self._dispatcher.dispatch(event)

    # teardown steps

    async def _end_waits(self) -> None:
        waits = list(self._waits)
        for wait in waits:
            wait.events.put_nowait(
                EventBusClosedError(
                    f"the bus closed while subscription {wait.subscription.subscription_id!r} "
                    f"waited for {wait.subscription.event_type!r}"
                )
            )
        # Each wait unregisters its subscription on the way out: let it, before the client
        # that does it may be closed.
        exits = [asyncio.ensure_future(wait.exited.wait()) for wait in waits]
        if exits:
            _, pending = await asyncio.wait(exits, timeout=self._drain_timeout_s)
            for future in pending:
                future.cancel()
            if pending:
                raise TimeoutError(
                    f"{len(pending)} wait(s) did not end within {self._drain_timeout_s} s"
                )

    async def _stop_listener(self) -> None:
        self._stopping = True
        tasks = [task for task in (self._starting, *self._listeners) if task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self._listener_stop_timeout_s)
            if pending:
                raise TimeoutError(
                    f"the listener did not stop within {self._listener_stop_timeout_s} s"
                )

    async def _close_client(self) -> None:
        await close_client(self._client)

    async def _drop_private_loop_connections(self) -> None:
        await drop_idle_connections(self._client)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
