"""The worker's side of the drain on SIGTERM/SIGINT (W17): it steps the domain's drain
machine (``drain_step``, invariants I1-I5) with the loop's events and says what happens.

The loop tells it what occurred — the signal, a read that returned, a dispatch that completed
or aborted — and it answers what the loop may do: read, dispatch, ack. It changes when the
drain protocol or its operator messages do; the loop's reading and dispatching do not.
"""

from __future__ import annotations

import asyncio
import logging

from plaita.application.ports import Delivery, WorkerMetrics
from plaita.domain.worker_state import DrainAction, DrainEvent, DrainState, drain_step

# The loop's logger: operators filter the drain events under plaita.worker.
log = logging.getLogger("plaita.worker")


class Drain:
    """The drain state of one worker run, and its log lines."""

    def __init__(self, *, consumer: str, timeout_seconds: float, metrics: WorkerMetrics) -> None:
        self.state = DrainState()
        self._consumer = consumer
        self._timeout_seconds = timeout_seconds
        self._metrics = metrics

    @property
    def reading(self) -> bool:
        return self.state.reading

    def begin(self, in_flight: int) -> None:
        """The stop signal: no more reads (the first call; later ones change nothing)."""
        if self.state.reading:
            self.state = drain_step(self.state, DrainEvent.SIGNAL_RECEIVED).state
            self._metrics.worker_up(False)
            log.info(
                "event=worker.draining consumer=%s in_flight=%d: no more reads; waiting for "
                "the running dispatches (at most %g s)",
                self._consumer,
                in_flight,
                self._timeout_seconds,
            )

    def admit(self, deliveries: list[Delivery]) -> list[Delivery]:
        """The deliveries of a read that may be dispatched."""
        admitted, gated = [], []
        for delivery in deliveries:
            step = drain_step(self.state, DrainEvent.READ_RETURNED)
            self.state = step.state
            if step.action is DrainAction.DISPATCH:
                admitted.append(delivery)
            else:
                gated.append(delivery.message_id)
        if gated:
            # I1: read after the drain began: neither dispatched nor acked; it stays pending
            # and another worker reclaims it.
            log.warning(
                "event=worker.drain_read_gate consumer=%s left_pending=%d message_ids=%s",
                self._consumer,
                len(gated),
                ",".join(gated),
            )
        return admitted

    def completed(self) -> bool:
        """A dispatch returned; whether its carrier may be settled (I3)."""
        step = drain_step(self.state, DrainEvent.DISPATCH_COMPLETED)
        self.state = step.state
        return step.action is DrainAction.ACK

    def aborted(self) -> None:
        """A dispatch raised: its carrier stays pending."""
        self.state = drain_step(self.state, DrainEvent.DISPATCH_ABORTED).state

    async def wait(self, inflight: set[asyncio.Task[None]]) -> None:
        """Wait for the running dispatches, at most the drain timeout."""
        running = {task for task in inflight if not task.done()}
        if not running:
            return
        _, unfinished = await asyncio.wait(running, timeout=self._timeout_seconds)
        if unfinished:
            # I2: the timeout ends the waiting, not the steps; they stay unacked (I3).
            self.state = drain_step(self.state, DrainEvent.DRAIN_TIMEOUT).state
            log.warning(
                "event=worker.drain_timeout consumer=%s still_running=%d timeout_s=%g: exiting "
                "without acking them; their carriers stay pending and another worker replays "
                "them from the last checkpoint (raise --drain-timeout-seconds to wait longer)",
                self._consumer,
                len(unfinished),
                self._timeout_seconds,
            )
