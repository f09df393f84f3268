"""Publishing events and turning them into resume carriers (V3, V4)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from plaita.application.null_objects import NO_TRACING
from plaita.application.ports import (
    Clock,
    EventLog,
    ExecutionRepository,
    IdGenerator,
    Inbox,
    SubscriptionStore,
    TaskQueue,
    Tracer,
)
from plaita.application.tenancy import tenant_scope
from plaita.domain.envelope import CarrierGenerations, EventPath, ResumeType, TaskEnvelope
from plaita.domain.events import Event, subscription_matches
from plaita.domain.limits import EVENT_DATA_LIMIT, EVENT_LIMIT, check_json_value
from plaita.domain.tracing import TraceContext

JSON = Any
log = logging.getLogger("plaita.events")


class PublishEvent:
    """Store an event and notify the event filters; keep it in its inbox first (V6).

    The inbox is written before the record and its notification: a wait that registers in
    between finds the event in the inbox, and one that registered earlier is found by the
    filter. A crash between the two writes leaves the event in the inbox only, where the
    next wait of its correlation still finds it; publishing again is safe (a duplicate is
    taken at most once per wait).
    """

    def __init__(
        self,
        *,
        events: EventLog,
        clock: Clock,
        ids: IdGenerator,
        inbox: Inbox,
        tracer: Tracer = NO_TRACING,
    ) -> None:
        self._tracer = tracer
        self._events = events
        self._clock = clock
        self._ids = ids
        self._inbox = inbox

    async def __call__(
        self,
        event_type: str,
        *,
        data: Mapping[str, JSON] | None = None,
        correlation_id: str | None = None,
        source: str | None = None,
        tenant_id: str = "default",
        event_id: str | None = None,
        trace_parent: TraceContext | None = None,
    ) -> Event:
        """Store the event. ``event_id`` None: a new one; a publisher that may publish one
        event again (a webhook delivery retried) names its own, so no wait takes the event
        twice. ``trace_parent`` is the publisher's trace context (an incoming request's), else
        the calling code's current span is (C6)."""
        check_json_value(data or {}, EVENT_DATA_LIMIT, field="data")
        attributes = {"plaita.event.type": event_type, "plaita.tenant.id": tenant_id}
        with self._tracer.span(
            f"publish {event_type}", parent=trace_parent, attributes=attributes
        ) as span:
            # The event carries the publisher's context, which the step it resumes links to.
            carried = span.context() or trace_parent
            event = Event(
                event_id=self._ids.new_id() if event_id is None else event_id,
                event_type=event_type,
                timestamp_ms=self._clock.now_ms(),
                data=dict(data or {}),
                correlation_id=correlation_id,
                source=source,
                tenant_id=tenant_id,
                traceparent=None if carried is None else carried.traceparent,
            )
            # The resume carrier embeds the whole event: its other fields count towards the
            # size, so a carrier the event filter writes for it always fits the envelope limit.
            check_json_value(event.to_json(), EVENT_LIMIT, field="data")
            await self._inbox.add(event)
            await self._events.append(event)
            span.outcome("published")
        return event


class FilterEvent:
    """Match one published event against the stored subscriptions and enqueue resumes (V4)."""

    def __init__(
        self,
        *,
        events: EventLog,
        subscriptions: SubscriptionStore,
        executions: ExecutionRepository,
        queue: TaskQueue,
        clock: Clock,
        generations: CarrierGenerations,
        path: EventPath = EventPath.FILTER,
        tracer: Tracer = NO_TRACING,
    ) -> None:
        self._tracer = tracer
        self._events = events
        self._subscriptions = subscriptions
        self._executions = executions
        self._queue = queue
        self._clock = clock
        self._generations = generations
        self._path = path

    async def __call__(self, event_id: str) -> int:
        """Return how many resume carriers were enqueued for the event."""
        event = await self._events.get(event_id)
        if event is None:
            log.warning(
                "event=filter.event_missing event_id=%s (expired or never stored)", event_id
            )
            return 0
        # A span in the publisher's trace; the resumes carry its context (C6).
        with self._tracer.span(
            f"filter {event.event_type}",
            parent=TraceContext.parse(event.traceparent),
            attributes={"plaita.event.id": event.event_id, "plaita.event.path": self._path.value},
        ) as span:
            enqueued = await self._resume_waits(event, span.context())
            span.outcome("resumed" if enqueued else "no_wait")
        return enqueued

    async def _resume_waits(self, event: Event, trace: TraceContext | None) -> int:
        enqueued = 0
        candidates = await self._subscriptions.find_for_event(
            event.event_type, event.correlation_id
        )
        for subscription in candidates:
            if not subscription_matches(subscription, event):
                continue
            with tenant_scope(subscription.tenant_id):  # the waiting execution's tenant (W24)
                state = await self._executions.load(subscription.execution_id)
            if state is None or state.is_terminal:
                # A doomed resume would only be short-circuited by a worker: drop the wait now.
                await self._subscriptions.remove(subscription.subscription_id)
                log.info(
                    "event=filter.subscription_dropped subscription_id=%s execution_id=%s "
                    "status=%s",
                    subscription.subscription_id,
                    subscription.execution_id,
                    "missing" if state is None else state.status.value,
                )
                continue
            await self._queue.enqueue(
                TaskEnvelope.resume(
                    execution_id=state.execution_id,
                    flow_id=state.flow_id,
                    resume_type=ResumeType.EVENT,
                    event=event.to_json(),
                    subscription_id=subscription.subscription_id,
                    now_ms=self._clock.now_ms(),
                    tenant_id=state.tenant_id,
                    generations=self._generations,
                    origin=self._path.value,
                    traceparent=None if trace is None else trace.traceparent,
                )
            )
            enqueued += 1
            log.info(
                "event=filter.resume_enqueued event_id=%s execution_id=%s subscription_id=%s",
                event.event_id,
                state.execution_id,
                subscription.subscription_id,
            )
        return enqueued
