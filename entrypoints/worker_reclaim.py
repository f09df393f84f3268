"""Redelivery: when the worker reclaims idle pending carriers, and the one route every
carrier takes to the dead-letter queue (W2, W5, W9).

Which reclaimed carriers run is the domain's rule (``decide_reclaimed``), asked by the worker
step's gates; a skip costs a carrier nothing: ``--max-deliveries`` counts processing attempts
that crashed, which the worker step records with the execution (W2), never Redis's delivery
counter. Every dead letter, whatever sent it, goes through the guard.
"""

from __future__ import annotations

import logging
import time

from plaita.application.ports import (
    AlertSink,
    Clock,
    DeadLetterAlert,
    Delivery,
    TaskQueue,
    WorkerMetrics,
)
from plaita.application.use_cases.dead_letter_guard import (
    GuardDeadLetter,
    carrier_execution_id,
    carrier_tenant_id,
)

# The loop's logger: operators filter the reclaim events under plaita.worker.
log = logging.getLogger("plaita.worker")


class CarrierSource:
    """The next carriers: first, every ``claim_min_idle_ms / 2``, idle pending entries of any
    consumer; when that brings none, a blocking read of new entries (W2)."""

    def __init__(
        self, queue: TaskQueue, consumer: str, *, read_block_ms: int, claim_min_idle_ms: int
    ) -> None:
        self._queue = queue
        self._consumer = consumer
        self._read_block_ms = read_block_ms
        self._claim_min_idle_ms = claim_min_idle_ms
        self._next_reclaim = 0.0

    async def fetch(self, count: int) -> list[Delivery]:
        deliveries: list[Delivery] = []
        if time.monotonic() >= self._next_reclaim:
            self._next_reclaim = time.monotonic() + self._claim_min_idle_ms / 2000
            deliveries = await self._queue.reclaim(
                self._consumer, min_idle_ms=self._claim_min_idle_ms, count=count
            )
        if not deliveries:
            deliveries = await self._queue.read(
                self._consumer, count=count, block_ms=self._read_block_ms
            )
        return deliveries


class DeadLetterRoute:
    """Every way to the DLQ goes through the guard (W9).

    Without a guard every dead letter is released unguarded (library and test use).
    """

    def __init__(
        self,
        queue: TaskQueue,
        guard: GuardDeadLetter | None,
        metrics: WorkerMetrics,
        *,
        alerts: AlertSink | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._queue = queue
        self._guard = guard
        self._metrics = metrics
        self._alerts = alerts
        self._clock = clock

    async def send(self, delivery: Delivery, reason: str, *, refused: bool = False) -> None:
        """Dead-letter ``delivery`` for ``reason``, or keep it when the guard says so.

        ``refused``: the carrier was refused for what it is (undecodable, too new, too old, the
        wrong flow), so a recovery copy would be refused again and is never made.
        """
        if self._guard is None:
            dlq_id = await self._queue.dead_letter(delivery, reason)
            self._metrics.dead_lettered("unguarded")
            log.error(
                "event=worker.dead_lettered message_id=%s reason=%r", delivery.message_id, reason
            )
            self._alert(delivery, reason, dlq_id)
            return
        outcome = await self._guard(delivery, reason, schema_rejected=refused)
        if outcome.released:
            self._metrics.dead_lettered(outcome.reason)
            if outcome.dlq_id is not None:
                self._alert(delivery, reason, outcome.dlq_id)
        else:
            self._metrics.guard_kept(outcome.reason)

    def _alert(self, delivery: Delivery, reason: str, dlq_id: str) -> None:
        """C5: offer the alert and move on; the sink never blocks and never raises."""
        if self._alerts is None:
            return
        self._alerts.offer(
            DeadLetterAlert(
                dlq_id=dlq_id,
                message_id=delivery.message_id,
                execution_id=carrier_execution_id(delivery),
                tenant_id=carrier_tenant_id(delivery),
                reason=reason,
                at_ms=self._clock.now_ms() if self._clock is not None else 0,
            )
        )
