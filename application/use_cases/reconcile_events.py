"""Re-scan stored events by time and filter them again: recovers lost notifications (V5).

One call is one round (see ``plaita.domain.reconcile`` for the window): list the stored
events of the window page by page, run the event filter on each, and store the new cursor
only when every page was listed and every event filtered. Anything that fails voids the
round: the cursor stays, nothing is counted, and the next round replays the same window.

Replaying is safe because filtering is idempotent in effect: a suspension resumes only for
a carrier naming its current subscription, an execution already resumed has no
subscription left, and the worker refuses an event a wait of the same execution already
took (V6). A replayed event is matched only against the subscriptions that existed when it
was published — as the notification stream would have matched it — so an old event never
wakes a wait registered after it (the next turn of a loop waiting for the same type).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from plaita.application.null_objects import NO_TRACING
from plaita.application.ports import (
    Clock,
    EventLog,
    ExecutionRepository,
    ReconcilerCursor,
    SubscriptionStore,
    TaskQueue,
    Tracer,
)
from plaita.application.use_cases.events import FilterEvent
from plaita.domain.envelope import CarrierGenerations, EventPath
from plaita.domain.events import Event, EventQuery, EventSubscription, SubscriptionQuery
from plaita.domain.reconcile import (
    PageRequest,
    ReconcileRoundError,
    ReconcileSettings,
    ReconcileWindow,
    first_page,
    next_page,
    plan_window,
)

log = logging.getLogger("plaita.reconcile")


@attrs.frozen
class ReconcileRound:
    """What one successful round did."""

    window: ReconcileWindow
    #: Events the round filtered again (each once, even if pages overlapped at a millisecond).
    replayed: int
    #: Resume carriers those events enqueued (lost notifications recovered, or duplicates the
    #: worker drops).
    resumes: int
    pages: int
    #: The stored cursor after the round.
    cursor_ms: int


class ReconcileEvents:
    def __init__(
        self,
        *,
        events: EventLog,
        subscriptions: SubscriptionStore,
        executions: ExecutionRepository,
        queue: TaskQueue,
        cursor: ReconcilerCursor,
        clock: Clock,
        generations: CarrierGenerations,
        settings: ReconcileSettings | None = None,
        tracer: Tracer = NO_TRACING,
    ) -> None:
        self._tracer = tracer
        self._generations = generations
        self._events = events
        self._subscriptions = subscriptions
        self._executions = executions
        self._queue = queue
        self._cursor = cursor
        self._clock = clock
        self.settings = settings or ReconcileSettings()

    async def __call__(self) -> ReconcileRound:
        """Run one round; ``ReconcileRoundError`` (cursor unchanged) if any part failed."""
        now_ms = self._clock.now_ms()
        window: ReconcileWindow | None = None
        stored: int | None = None
        attempted = 0
        try:
            stored = await self._cursor.get()
            window = plan_window(stored, now_ms, self.settings)
            resumes = pages = 0
            if not window.is_empty:
                request: PageRequest | None = first_page(window, self.settings.page_size)
                while request is not None:
                    page = await self._events.list(
                        EventQuery(
                            since_ms=request.since_ms,
                            until_ms=request.until_ms,
                            limit=request.limit,
                        )
                    )
                    pages += 1
                    for event in page:
                        if event.event_id in request.skip:
                            continue
                        attempted += 1
                        resumes += await self._replay(event)
                    request = next_page(
                        request,
                        [(event.timestamp_ms, event.event_id) for event in page],
                        self.settings.page_size,
                    )
            if window.cursor_after_ms != stored:
                await self._cursor.set(window.cursor_after_ms)
        except Exception as exc:
            where = (
                "before its window was known"
                if window is None
                else f"over [{window.since_ms}, {window.until_ms})"
            )
            raise ReconcileRoundError(
                f"reconcile round {where} failed after filtering {attempted} event(s) again: "
                f"{type(exc).__name__}: {exc}. The cursor stays at {stored} and none of them "
                "counts as replayed; the next round replays the same window"
            ) from exc
        assert window is not None
        return ReconcileRound(
            window=window,
            replayed=attempted,
            resumes=resumes,
            pages=pages,
            cursor_ms=window.cursor_after_ms,
        )

    async def _replay(self, event: Event) -> int:
        as_published = SubscriptionsAsOf(self._subscriptions, event.timestamp_ms)
        enqueued = await FilterEvent(
            events=self._events,
            subscriptions=as_published,
            executions=self._executions,
            queue=self._queue,
            clock=self._clock,
            generations=self._generations,
            path=EventPath.RECONCILER,
            tracer=self._tracer,
        )(event.event_id)
        if enqueued:
            log.info(
                "event=reconcile.resumes_enqueued event_id=%s event_type=%s resumes=%d "
                "(its notification was lost, or its first resume is still queued: the worker "
                "drops the duplicate)",
                event.event_id,
                event.event_type,
                enqueued,
            )
        return enqueued


class SubscriptionsAsOf:
    """The subscription store as a filter saw it when an event was published.

    Only subscriptions created at or before ``as_of_ms`` are found; the rest of the store is
    passed through. Creation and publication times come from different hosts' clocks: keep
    them in sync (NTP), or a lagging worker clock lets a replay reach a later wait.
    """

    def __init__(self, store: SubscriptionStore, as_of_ms: int) -> None:
        self._store = store
        self._as_of_ms = as_of_ms

    async def add(self, subscription: EventSubscription) -> None:
        await self._store.add(subscription)

    async def remove(self, subscription_id: str) -> bool:
        return await self._store.remove(subscription_id)

    async def get(self, subscription_id: str) -> EventSubscription | None:
        return await self._store.get(subscription_id)

    async def find(self, event_type: str) -> Sequence[EventSubscription]:
        return [s for s in await self._store.find(event_type) if self._existed(s)]

    async def find_for_event(
        self, event_type: str, correlation_id: str | None
    ) -> Sequence[EventSubscription]:
        found = await self._store.find_for_event(event_type, correlation_id)
        return [s for s in found if self._existed(s)]

    async def list(self, query: SubscriptionQuery) -> Sequence[EventSubscription]:
        return [s for s in await self._store.list(query) if self._existed(s)]

    def _existed(self, subscription: EventSubscription) -> bool:
        return subscription.created_at_ms <= self._as_of_ms
