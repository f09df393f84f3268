"""This worker's registry record (W16) and the task that keeps it fresh.

It owns the record's lifecycle — announce, register (retried in the background), heartbeat,
the draining/stopping/stopped writes and the removal — and the timings they follow. It
changes when the registry protocol changes; the worker loop only calls ``announce``,
``start``, ``drain`` and ``stop`` and asks whether the record says ``dispatchable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from plaita.application.null_objects import NoMetrics
from plaita.application.outages import StoreOutages
from plaita.application.ports import Clock, WorkerInstance, WorkerMetrics, WorkerRegistry
from plaita.domain.envelope import CarrierGenerations
from plaita.domain.lease import heartbeat_interval_seconds
from plaita.domain.outages import Backoff
from plaita.domain.worker_state import (
    REGISTRATION_BACKOFF,
    STATUS_FLUSH_RETRIES,
    STOPPED_TOMBSTONE_TTL_SECONDS,
    ChangeOutcome,
    WorkerStatus,
    change_status,
    is_dispatchable,
    registration_retry_delay,
    registration_status,
    registry_writes_allowed,
)
from plaita.entrypoints.outages import store_outages

# The loop's logger: operators filter the registry events under plaita.worker.
log = logging.getLogger("plaita.worker")

#: A registry record outlives this many missed heartbeats.
RECORD_TTL_HEARTBEATS = 3
#: Pause between the immediate retries of a drain/stop status write (A45-03).
STATUS_FLUSH_PAUSE_SECONDS = 0.05

Sleep = Callable[[float], Awaitable[None]]


class Presence:
    """This worker's registry record (W16): starting → running → draining → stopping → stopped.

    Other workers read it to decide whether this one is a live lease holder (W5); only
    ``running`` counts. A failed start-up registration does not stop the worker: it retries in
    the background (1 s → 30 s, A2R19-03) while the worker consumes, and until it succeeds the
    record does not say ``running``. Every change goes through the domain's status machine;
    draining and stopping are written at once, not at the next heartbeat.
    """

    def __init__(
        self,
        registry: WorkerRegistry,
        *,
        instance_id: str,
        clock: Clock,
        lease_ttl_ms: int,
        generations: CarrierGenerations | None = None,
        metrics: WorkerMetrics | None = None,
        sleep: Sleep = asyncio.sleep,
        outages: StoreOutages | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.status = WorkerStatus.STARTING
        self.registered = False
        self.registration_failures = 0
        self.heartbeat_seconds = heartbeat_interval_seconds(lease_ttl_ms / 1000)
        self.record_ttl_ms = max(1, round(RECORD_TTL_HEARTBEATS * self.heartbeat_seconds * 1000))
        self._registry = registry
        self._clock = clock
        self._generations = generations or CarrierGenerations()
        self._metrics = metrics or NoMetrics()
        self._sleep = sleep
        self._started_ms = clock.now_ms()
        self._written = False
        # Registration, heartbeats, drain and stop write one after another, each with the
        # status current when it writes: a slow ``running`` write never lands after ``draining``.
        self._writing = asyncio.Lock()
        self._closing = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        # A registry outage is one WARNING and one INFO, shared with the worker's other loops.
        outages = outages or store_outages()
        beat_ms = round(self.heartbeat_seconds * 1000)
        self._registration = outages.loop(
            "registration",
            consequence="this worker consumes but is not registered, so other workers do not "
            "count it as running (lease conflicts with it are never acked) until it is",
            backoff=REGISTRATION_BACKOFF,
        )
        self._heartbeat = outages.loop(
            "heartbeat",
            consequence=f"this worker's registry record is not refreshed; it expires "
            f"{self.record_ttl_ms} ms after the last heartbeat",
            backoff=Backoff(base_ms=beat_ms, cap_ms=beat_ms),
        )

    @property
    def dispatchable(self) -> bool:
        return self.registered and is_dispatchable(self.status)

    async def announce(self) -> None:
        """Write ``starting`` (best effort: ``start`` registers whatever happened here)."""
        async with self._writing:
            await self._put(self.status, what="announce")

    async def start(self) -> None:
        """Register as ``running``; when that fails, keep trying in the background."""
        async with self._writing:
            if not await self._register():
                self.registration_failures = 1
        self._keeper = asyncio.create_task(self._keep())

    async def drain(self) -> None:
        async with self._writing:
            await self._change(WorkerStatus.DRAINING)

    async def stop(self) -> None:
        """Stop retrying and heartbeating first, then write stopping and stopped, then remove.

        The stopped record (5 s) is written before the key is deleted: if the delete fails the
        key still says stopped, never running (A46-01).
        """
        self._closing.set()
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        async with self._writing:
            await self._change(WorkerStatus.STOPPING)
            tombstone_ms = STOPPED_TOMBSTONE_TTL_SECONDS * 1000
            await self._change(WorkerStatus.STOPPED, ttl_ms=tombstone_ms)
            if self._written:
                try:
                    await self._registry.remove(self.instance_id)
                except Exception as exc:
                    log.error(
                        "event=registry.unregister_failed instance=%s error=%r: the record "
                        "says stopped and expires in %d s",
                        self.instance_id,
                        exc,
                        STOPPED_TOMBSTONE_TTL_SECONDS,
                    )
            # Closed is never written: it shuts the gate on every later write (A46-03).
            self.status = change_status(self.status, WorkerStatus.CLOSED).status

    async def _keep(self) -> None:
        while True:
            if self.registered:
                wait = self.heartbeat_seconds
            else:
                wait = registration_retry_delay(self.registration_failures)
            if await self._pause(wait):
                return
            async with self._writing:
                if self._closing.is_set() or not registry_writes_allowed(self.status):
                    return
                if not self.registered:
                    if await self._register():
                        self.registration_failures = 0
                    else:
                        self.registration_failures += 1
                elif (error := await self._write(self.status)) is not None:
                    self._heartbeat.failed(error)
                else:
                    self._heartbeat.succeeded()

    async def _register(self) -> bool:
        target = registration_status(self.status)
        if target is None:
            return True
        error = await self._write(target)
        if error is not None:
            self._registration.failed(error)
            return False
        self._registration.succeeded()
        self.status = change_status(self.status, target).status
        self.registered = True
        log.info("event=registry.registered instance=%s status=%s", self.instance_id, self.status)
        return True

    async def _change(self, requested: WorkerStatus, *, ttl_ms: int | None = None) -> None:
        change = change_status(self.status, requested)
        if change.outcome is not ChangeOutcome.APPLIED:
            return
        self.status = change.status
        if not change.write_now or not self._written:
            return
        for attempt in range(1 + STATUS_FLUSH_RETRIES):
            if await self._put(change.status, ttl_ms=ttl_ms, what="flush"):
                return
            if attempt < STATUS_FLUSH_RETRIES:
                await self._sleep(STATUS_FLUSH_PAUSE_SECONDS)
        log.error(
            "event=registry.status_flush_failed instance=%s status=%s: the record keeps its "
            "last status until it expires (%d ms)",
            self.instance_id,
            change.status,
            self.record_ttl_ms,
        )

    async def _put(self, status: WorkerStatus, *, what: str, ttl_ms: int | None = None) -> bool:
        error = await self._write(status, ttl_ms=ttl_ms)
        if error is not None:
            log.debug(
                "event=registry.write_failed instance=%s what=%s error=%r",
                self.instance_id,
                what,
                error,
            )
        return error is None

    async def _write(
        self, status: WorkerStatus, *, ttl_ms: int | None = None
    ) -> BaseException | None:
        """Write the record; the error when the store refused it (the caller says what then)."""
        now_ms = self._clock.now_ms()
        record = WorkerInstance(
            instance_id=self.instance_id,
            status=status.value,
            heartbeat_ms=now_ms,
            started_ms=self._started_ms,
            config_family=self._generations.config_family or "",
            config_generation=self._generations.config_generation or "",
            budget_generation=self._generations.budget_generation or "",
        )
        try:
            await self._registry.put(record, ttl_ms=ttl_ms or self.record_ttl_ms)
        except Exception as exc:
            return exc
        # A write that reached the store may need undoing at stop, even after a drain.
        self._written = True
        self.registered = self.registered or status is not WorkerStatus.STARTING
        self._metrics.heartbeat(now_ms / 1000)
        return None

    async def _pause(self, seconds: float) -> bool:
        """Sleep, or return early once stop began; whether it did."""
        closing = asyncio.ensure_future(self._closing.wait())
        sleeping = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait({closing, sleeping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (closing, sleeping):
                task.cancel()
        return self._closing.is_set()
