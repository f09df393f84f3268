"""The worker's report of what the DLQ length cap dropped (W10): a counter, and a WARNING
at most once a minute that says what was lost and what to do."""

from __future__ import annotations

import asyncio
import logging

import pytest

from plaita.adapters.memory.queue import MemoryTaskQueue
from plaita.adapters.prometheus.worker import PrometheusWorkerMetrics
from plaita.domain.envelope import LEGACY_GENERATIONS, TaskEnvelope
from plaita.entrypoints.worker_chores import report_dead_letter_drops

from ..application.conftest import FakeClock


async def _dead_letter(queue: MemoryTaskQueue, count: int) -> None:
    for n in range(count):
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
    for delivery in await queue.read("w1", count=count, block_ms=0):
        await queue.dead_letter(delivery, "budget spent")


async def _until(check: object, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_drops_are_counted_and_warned_about_at_most_once_a_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = MemoryTaskQueue(FakeClock(), dead_letter_max_len=2)
    metrics = PrometheusWorkerMetrics()
    now = [0.0]
    stop = asyncio.Event()

    def trimmed() -> float:
        return metrics.registry.get_sample_value("plaita_dlq_trimmed_total") or 0.0

    with caplog.at_level(logging.WARNING, logger="plaita.worker"):
        reporting = asyncio.create_task(
            report_dead_letter_drops(
                queue,
                metrics,
                stop,
                every_seconds=0.01,
                warn_every_seconds=60,
                monotonic=lambda: now[0],
            )
        )
        await _dead_letter(queue, 5)
        await _until(lambda: trimmed() == 3)
        await _until(lambda: len(caplog.records) == 1)
        await _dead_letter(queue, 1)
        await _until(lambda: trimmed() == 4)
        await asyncio.sleep(0.05)
        assert len(caplog.records) == 1  # within the minute: counted, not warned again
        now[0] = 60.0
        await _until(lambda: len(caplog.records) == 2)
        await _dead_letter(queue, 2)
        stop.set()
        await asyncio.wait_for(reporting, 5)

    messages = [record.getMessage() for record in caplog.records]
    assert [m.split(":")[0] for m in messages] == [
        "event=dlq.trimmed dropped=3 total=3",
        "event=dlq.trimmed dropped=1 total=4",
        "event=dlq.trimmed dropped=2 total=6",  # the last report, made on stop
    ]
    assert "replay or inspect" in messages[0] and "PLAITA_DLQ_MAX_LEN" in messages[0]
    assert trimmed() == 6


async def test_nothing_is_said_while_nothing_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    queue = MemoryTaskQueue(FakeClock())
    metrics = PrometheusWorkerMetrics()
    stop = asyncio.Event()
    await _dead_letter(queue, 3)

    with caplog.at_level(logging.WARNING, logger="plaita.worker"):
        reporting = asyncio.create_task(
            report_dead_letter_drops(queue, metrics, stop, every_seconds=0.01)
        )
        await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(reporting, 5)

    assert caplog.records == []
    assert metrics.registry.get_sample_value("plaita_dlq_trimmed_total") == 0.0
