"""The scheduler service: every poll interval, one tick over every schedule (W22).

``plaita scheduler`` runs it alone; ``plaita dev`` runs it beside its worker. Several may run
against one store: each due is claimed by one of them for the claim's TTL (``schedule_claim``
keys on Redis, claim rows on SQL), and a due that two of them fire anyway — a claim expired
while its start was on the way — starts one execution, under the due's dedup key.

A tick that fails (the store does not answer) is retried after a capped back-off and
reported once to the process's ``StoreOutages``; nothing is lost, since an unrecorded due
waits after the cursor. On SIGTERM/SIGINT the tick in progress finishes and the service
stops: a due it had claimed and not recorded waits for the claim's TTL, then another
scheduler (or this one, restarted) fires it — still on time within the misfire grace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from plaita.application.outages import StoreOutages
from plaita.application.use_cases.schedules import DueReport, TickReport
from plaita.domain.cron_schedules import DueOutcome
from plaita.domain.outages import Backoff
from plaita.entrypoints.event_filter import Pause, pause_until_stopped

log = logging.getLogger("plaita.scheduler")

#: The bounds of ``--poll-interval-seconds`` (PLAITA_SCHEDULER_POLL_INTERVAL_SECONDS).
MIN_POLL_INTERVAL_SECONDS = 0.05
MAX_POLL_INTERVAL_SECONDS = 60.0
#: After a failed tick: one poll interval at least, doubling up to 30 s.
TICK_BACKOFF_CAP_MS = 30_000


class SchedulerService:
    def __init__(
        self,
        *,
        tick: Callable[[], Awaitable[TickReport]],
        holder_id: str,
        poll_interval_seconds: float,
        claim_ttl_ms: int,
        grace_ms: int,
        outages: StoreOutages,
        pause: Pause = pause_until_stopped,
    ) -> None:
        self._tick = tick
        self._pause = pause
        self._holder_id = holder_id
        self.poll_interval_seconds = poll_interval_seconds
        self.claim_ttl_ms = claim_ttl_ms
        self.grace_ms = grace_ms
        base_ms = max(1, int(poll_interval_seconds * 1000))
        self._outage = outages.loop(
            "scheduler",
            consequence="no schedule fires; dues wait and fire on time once it answers "
            "within the misfire grace, later ones by their catch-up policy",
            backoff=Backoff(base_ms=base_ms, cap_ms=max(base_ms, TICK_BACKOFF_CAP_MS)),
        )
        self.ticks = 0

    async def run(self, stop: asyncio.Event) -> None:
        log.info(
            "event=scheduler.started holder=%s poll_interval_s=%g claim_ttl_ms=%d "
            "misfire_grace_ms=%d",
            self._holder_id,
            self.poll_interval_seconds,
            self.claim_ttl_ms,
            self.grace_ms,
        )
        while not stop.is_set():
            wait = self.poll_interval_seconds
            try:
                report = await self._tick()
            except Exception as exc:  # a store outage or a surprise: logged once, retried
                wait = max(wait, self._outage.failed(exc))
            else:
                self._outage.succeeded()
                self.ticks += 1
                _log_report(report)
            await self._pause(stop, wait)
        log.info("event=scheduler.stopped holder=%s ticks=%d", self._holder_id, self.ticks)


def _log_report(report: TickReport) -> None:
    for due in report.dues:
        _log_due(due)
    for ref in report.truncated:
        log.warning(
            "event=schedule.dues_passed_over schedule_id=%s tenant_id=%s: more dues were "
            "waiting than one tick looks at; the oldest were passed over without a record "
            "(the schedule was paused or unreachable for long — resume it or check its cron)",
            ref.schedule_id,
            ref.tenant_id,
        )


def _log_due(due: DueReport) -> None:
    fields = f"schedule_id={due.ref.schedule_id} tenant_id={due.ref.tenant_id} due_ms={due.due_ms}"
    if due.outcome is DueOutcome.FIRED:
        log.info(
            "event=schedule.fired %s execution_id=%s deduplicated=%s recorded=%s",
            fields,
            due.execution_id,
            due.deduplicated,
            due.recorded,
        )
    elif due.outcome is DueOutcome.FAILED:
        log.warning(
            "event=schedule.fire_failed %s error=%r: the due is not tried again; fix the "
            "cause (register the flow, fix the input) — later dues fire as usual",
            fields,
            due.error,
        )
    elif due.outcome is DueOutcome.SKIPPED:
        log.info("event=schedule.skipped %s reason=%s", fields, due.reason)
    else:
        log.info("event=schedule.buffered %s", fields)
