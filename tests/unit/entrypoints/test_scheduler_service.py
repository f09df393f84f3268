"""The scheduler service loop (W22): a tick every poll interval until stopped, a failed tick
retried after a back-off and reported once, each due logged; and the store each backend
wires. Pauses go through an injected function that records them and returns at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from plaita.application.use_cases.schedules import DueReport, TickReport
from plaita.domain.cron_schedules import DueOutcome, ScheduleRef
from plaita.domain.schedule_ticks import SkipReason
from plaita.entrypoints.container import build_container
from plaita.entrypoints.outages import store_outages
from plaita.entrypoints.scheduler import SchedulerService
from plaita.entrypoints.settings import Settings

REF = ScheduleRef("default", "nightly")


class Ticks:
    """A tick that answers from a script (a report, or an error to raise), then stops."""

    def __init__(self, stop: asyncio.Event, *script: TickReport | Exception) -> None:
        self.stop = stop
        self.script = list(script)
        self.calls = 0

    async def __call__(self) -> TickReport:
        self.calls += 1
        answer = self.script.pop(0)
        if not self.script:
            self.stop.set()
        if isinstance(answer, Exception):
            raise answer
        return answer


def service(ticks: Ticks, pauses: list[float]) -> SchedulerService:
    async def pause(stop: asyncio.Event, seconds: float) -> None:
        pauses.append(seconds)

    return SchedulerService(
        tick=ticks,
        holder_id="replica-a",
        poll_interval_seconds=0.5,
        claim_ttl_ms=30_000,
        grace_ms=61_000,
        outages=store_outages(),
        pause=pause,
    )


async def test_it_ticks_every_poll_interval_until_stopped_and_logs_each_due(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="plaita.scheduler")
    stop = asyncio.Event()
    fired = DueReport(REF, 60_000, DueOutcome.FIRED, True, execution_id="x-1")
    skipped = DueReport(REF, 120_000, DueOutcome.SKIPPED, True, reason=SkipReason.OVERLAP)
    failed = DueReport(REF, 180_000, DueOutcome.FAILED, True, error="UnknownFlowError: gone")
    ticks = Ticks(stop, TickReport(1, (fired,)), TickReport(2, (skipped, failed)), TickReport(3))
    pauses: list[float] = []

    await service(ticks, pauses).run(stop)

    assert ticks.calls == 3 and pauses == [0.5, 0.5, 0.5]
    text = caplog.text
    assert "event=scheduler.started holder=replica-a poll_interval_s=0.5" in text
    assert "event=schedule.fired schedule_id=nightly tenant_id=default due_ms=60000 " in text
    assert "event=schedule.skipped schedule_id=nightly" in text and "reason=overlap" in text
    assert "event=schedule.fire_failed" in text and "UnknownFlowError: gone" in text
    assert "event=scheduler.stopped holder=replica-a ticks=3" in text


async def test_a_failed_tick_backs_off_is_reported_once_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="plaita.outages")
    stop = asyncio.Event()
    down = ConnectionError("redis is down")
    ticks = Ticks(stop, down, down, TickReport(3))
    pauses: list[float] = []

    await service(ticks, pauses).run(stop)

    assert ticks.calls == 3
    assert pauses[0] >= 0.5 and pauses[1] > pauses[0]  # doubling from one poll interval
    assert caplog.text.count("event=store.unreachable") == 1
    assert "event=store.recovered" in caplog.text


def test_a_truncated_window_is_a_warning_naming_the_schedule(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    ticks = Ticks(stop, TickReport(1, truncated=(REF,)))

    asyncio.run(service(ticks, []).run(stop))

    assert "event=schedule.dues_passed_over schedule_id=nightly" in caplog.text


@pytest.mark.parametrize(
    ("settings", "store"),
    [
        (lambda tmp: Settings(backend="memory"), "MemoryScheduleStore"),
        (lambda tmp: Settings(backend="redis"), "RedisScheduleStore"),
        (
            lambda tmp: Settings(storage="sql", database_url=f"sqlite:///{tmp}/plaita.db"),
            "SqlScheduleStore",
        ),
    ],
)
def test_schedules_live_where_the_flows_live(
    settings: Callable[[object], Settings], store: str, tmp_path: object
) -> None:
    """W22, S4: the backend's store, or the database with PLAITA_STORAGE=sql (built, never
    connected)."""
    container = build_container(settings(tmp_path))

    assert type(container.schedules()).__name__ == store
    assert type(container.scheduler_tick().settings.grace_ms) is int
