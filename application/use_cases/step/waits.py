"""How a step suspends: subscriptions, the inbox and timers (E6, V6, V8).

An ``event`` node registers its subscription *first* and only then looks in the inbox of its
correlation id. Every event is therefore seen by one of the two paths: one published before
the registration is in the inbox (publishing writes the inbox before the event record and
its notification), one published after it finds the subscription through the event filter.
An inbox event is taken atomically per (execution, event) — set-if-absent — so it is applied
to at most one wait of an execution, and a step re-run after a crash (same step, same
deterministic subscription id) takes the same event again and decides as the first run did.
Events that arrive through the filter are taken the same way when their resume is applied
(``take_for_resume``), so a later wait never takes them from the inbox again.

Registering answers with a value, never by writing into a shared dispatch: a ``Suspension``
to checkpoint, or a ``ReadyEvent`` the engine resumes the wait with in the same step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.distributed import ReadyEvent, WaitRegistration
from plaita.application.engine.strategies import (
    event_subscription,
    sleep_duration_ms,
    wait_timeout_ms,
)
from plaita.application.ports import Clock, DelayQueue, IdGenerator, Inbox, SubscriptionStore
from plaita.domain.envelope import CarrierGenerations, ResumeType, TaskEnvelope
from plaita.domain.events import (
    Event,
    EventSubscription,
    pick_inbox_event,
    wait_subscription_id,
)
from plaita.domain.execution import Suspension
from plaita.domain.flow import EventNode, SleepNode

JSON = Any
log = logging.getLogger("plaita.worker.step")


class WaitRegistrar:
    """Registers the waits of the dispatches of one worker step."""

    def __init__(
        self,
        *,
        subscriptions: SubscriptionStore,
        delay: DelayQueue,
        clock: Clock,
        ids: IdGenerator,
        generations: CarrierGenerations,
        inbox: Inbox,
    ) -> None:
        self._generations = generations
        self._subscriptions = subscriptions
        self._delay = delay
        self._clock = clock
        self._ids = ids
        self._inbox = inbox

    def for_step(self, steps: int) -> StepRegistrar:
        """The engine's SuspensionRegistrar for the step of an execution that has completed
        ``steps`` steps (it names the step's wait, so a re-run names it alike: V6)."""
        return StepRegistrar(self, steps)

    async def register_event_wait(
        self, steps: int, node: EventNode, context: ExecutionContext
    ) -> WaitRegistration:
        now = self._clock.now_ms()
        subscription_id = wait_subscription_id(
            context.tenant_id, context.execution_id, node.id, steps
        )
        subscription = event_subscription(node, context, subscription_id, now)
        await self._subscriptions.add(subscription)
        early = await self._take_from_inbox(subscription)
        if early is not None:
            # V6: the event is already here; the step resumes at once, with no timer.
            log.info(
                "event=wait.inbox_hit execution_id=%s node_id=%s subscription_id=%s event_id=%s",
                context.execution_id,
                node.id,
                subscription_id,
                early.event_id,
            )
            return ReadyEvent(subscription_id, early)
        timeout_ms = wait_timeout_ms(node)
        wake_at = None
        if timeout_ms is not None:
            wake_at = now + timeout_ms
            await self._delay.schedule(
                self._timer_carrier(context, subscription_id), due_ms=wake_at
            )
        return Suspension(node.id, subscription_id, wake_at)

    async def register_timer(self, node: SleepNode, context: ExecutionContext) -> Suspension:
        timer_id = self._ids.new_id()
        wake_at = self._clock.now_ms() + sleep_duration_ms(node)
        await self._delay.schedule(self._timer_carrier(context, timer_id), due_ms=wake_at)
        return Suspension(node.id, timer_id, wake_at)

    async def take_for_resume(
        self,
        execution_id: str,
        tenant_id: str,
        event: Mapping[str, JSON] | None,
        subscription_id: str,
    ) -> str | None:
        """Take a filter-delivered event for the suspension it resumes (V6).

        None when it may be applied; otherwise the subscription of an earlier wait of this
        execution that already took it, and the resume must have no effect.
        """
        if event is None:
            return None
        correlation_id, event_id = event.get("correlation_id"), event.get("event_id")
        if not isinstance(correlation_id, str) or not isinstance(event_id, str):
            return None  # not kept in an inbox: nothing else can have taken it
        holder = await self._inbox.take(
            tenant_id, correlation_id, execution_id, event_id, subscription_id
        )
        return None if holder == subscription_id else holder

    async def _take_from_inbox(self, subscription: EventSubscription) -> Event | None:
        if subscription.correlation_id is None:
            return None
        entries = await self._inbox.entries(
            subscription.tenant_id, subscription.correlation_id, subscription.execution_id
        )
        event = pick_inbox_event(subscription, entries)
        if event is None:
            return None
        holder = await self._inbox.take(
            subscription.tenant_id,
            subscription.correlation_id,
            subscription.execution_id,
            event.event_id,
            subscription.subscription_id,
        )
        # Another wait of this execution took it in between: no step of one execution runs
        # concurrently, so this only happens to a stale holder; leave it to the filter path.
        return event if holder == subscription.subscription_id else None

    def _timer_carrier(self, context: ExecutionContext, subscription_id: str) -> TaskEnvelope:
        return TaskEnvelope.resume(
            execution_id=context.execution_id,
            flow_id=context.flow_id,
            resume_type=ResumeType.TIMEOUT,
            subscription_id=subscription_id,
            now_ms=self._clock.now_ms(),
            tenant_id=context.tenant_id,
            generations=self._generations,
        )


@attrs.frozen
class StepRegistrar:
    """The engine's SuspensionRegistrar, bound to one step of one execution."""

    registrar: WaitRegistrar
    steps: int

    async def register_event_wait(
        self, node: EventNode, context: ExecutionContext
    ) -> WaitRegistration:
        return await self.registrar.register_event_wait(self.steps, node, context)

    async def register_timer(self, node: SleepNode, context: ExecutionContext) -> Suspension:
        return await self.registrar.register_timer(node, context)
