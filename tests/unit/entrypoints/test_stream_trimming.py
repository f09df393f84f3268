"""The stream-trim chore (S5): a trim every interval, failures logged and backed off, and the
worker and the event filter running it on their streams."""

from __future__ import annotations

import asyncio
import logging

import pytest
from dependency_injector import providers

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.application.outages import LoopOutage, StoreOutages
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.domain.events import Event
from plaita.domain.retention import NOTIFICATION_GRACE_MS
from plaita.entrypoints.container import build_container
from plaita.entrypoints.janitor import run_notification_trim
from plaita.entrypoints.settings import Settings
from plaita.entrypoints.stream_trimming import keep_trimming, trim_backoff

from ..application.conftest import FakeClock


class ScriptedTrim:
    """Answers each call from ``outcomes`` (an int removed, or an exception raised); sets
    ``stop`` once they are used up."""

    def __init__(self, stop: asyncio.Event, *outcomes: int | Exception) -> None:
        self.stop = stop
        self.outcomes = list(outcomes)
        self.calls: list[float] = []

    async def __call__(self) -> int:
        self.calls.append(asyncio.get_running_loop().time())
        outcome = self.outcomes.pop(0)
        if not self.outcomes:
            self.stop.set()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def a_loop(every_seconds: float) -> LoopOutage:
    outages = StoreOutages("redis", log=logging.getLogger("plaita.outages"))
    return outages.loop(
        "stream_trim", consequence="acked entries stay", backoff=trim_backoff(every_seconds)
    )


async def test_it_trims_every_interval_until_stopped(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    trim = ScriptedTrim(stop, 3, 0, 5)

    with caplog.at_level(logging.INFO, logger="plaita.streams"):
        await asyncio.wait_for(
            keep_trimming(trim, stop, stream="tasks", outage=a_loop(0.01), every_seconds=0.01), 5
        )

    assert len(trim.calls) == 3
    assert [r.getMessage() for r in caplog.records] == [
        "event=stream.trimmed stream=tasks removed=3",
        "event=stream.trimmed stream=tasks removed=5",
    ]


async def test_a_failing_trim_backs_off_and_reports_one_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store outage: one WARNING when it begins, one INFO when it ends, the pause doubling
    from one interval; never a traceback."""
    stop = asyncio.Event()
    trim = ScriptedTrim(stop, ConnectionError("down"), ConnectionError("down"), 1)

    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(
            keep_trimming(trim, stop, stream="tasks", outage=a_loop(0.02), every_seconds=0.02), 5
        )

    outage = [r for r in caplog.records if r.name == "plaita.outages"]
    assert [r.levelno for r in outage] == [logging.WARNING, logging.INFO]
    assert "event=store.unreachable" in outage[0].getMessage()
    assert "event=store.recovered" in outage[1].getMessage()
    assert all(r.exc_info is None for r in caplog.records)
    first, second, third = trim.calls
    assert third - second >= 0.04 > second - first - 0.001  # the pause doubled


async def test_the_worker_trims_the_task_stream_it_reads() -> None:
    """The worker's chore: acked carriers leave the stream, the pending one stays."""
    from plaita.entrypoints.worker import Worker

    clock = FakeClock()
    queue = MemoryTaskQueue(clock)
    for n in range(3):
        await queue.enqueue(
            TaskEnvelope.start(
                execution_id=f"x-{n}",
                flow_id="f",
                version="1",
                params={},
                now_ms=1,
                generations=LEGACY_GENERATIONS,
            )
        )
    first, second, third = await queue.read("w0", count=3, block_ms=0)
    await queue.ack(first.message_id)
    await queue.ack(second.message_id)
    stop = asyncio.Event()
    worker = Worker(
        queue=queue,
        process=None,  # type: ignore[arg-type]  # nothing is dispatched: no new carrier
        consumer="w1",
        read_block_ms=5,
        claim_min_idle_ms=3_600_000,
        trim_every_seconds=0.01,
    )

    running = asyncio.create_task(worker.run(stop))
    for _ in range(200):
        if (await queue.stats()).length == 1:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(running, 5)

    stats = await queue.stats()
    assert (stats.length, stats.pending) == (1, 1)
    assert await queue.touch("w0", [third.message_id]) == 1


async def test_the_event_filter_trims_notifications_past_the_buses_grace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Acked by every event filter, a notification still waits out the grace the event
    buses' group-less listeners get (PLAITA_STREAM_TRIM_INTERVAL_SECONDS is read)."""
    clock = FakeClock()
    container = build_container(Settings(backend="memory", stream_trim_interval_seconds=0.01))
    container.clock.override(providers.Object(clock))
    events = container.events()
    await events.ensure_group()
    await events.append(
        Event(event_id="ev-1", event_type="t", timestamp_ms=1, data={}, source="test")
    )
    [notification] = await events.read_notifications("f1", count=1, block_ms=0)
    await events.ack_notification(notification.notification_id)
    stop = asyncio.Event()

    with caplog.at_level(logging.INFO, logger="plaita.streams"):
        trimming = asyncio.create_task(run_notification_trim(container, stop))
        await asyncio.sleep(0.05)
        assert caplog.records == []
        clock.advance((NOTIFICATION_GRACE_MS + 1) / 1000)
        for _ in range(200):
            if caplog.records:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(trimming, 5)

    assert [r.getMessage() for r in caplog.records] == [
        "event=stream.trimmed stream=notifications removed=1"
    ]
