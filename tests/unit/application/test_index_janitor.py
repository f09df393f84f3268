"""The index janitor service: one prune per store and tick, within budget, never sleeping (V7)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from plaita.application.use_cases.index_janitor import IndexJanitorService, JanitorTick
from plaita.domain.janitor import DEFAULT_INTERVAL_SECONDS, plan_janitor

from .conftest import FakeClock


class FakeStore:
    """An IndexJanitor holding ``dead`` members; each prune removes up to its budget."""

    def __init__(self, dead: int = 0, *, fails: int = 0) -> None:
        self.dead = dead
        self.fails = fails
        self.budgets: list[int] = []

    async def prune_indexes(self, *, budget: int) -> int:
        self.budgets.append(budget)
        if self.fails:
            self.fails -= 1
            raise ConnectionError("Redis went away")
        pruned = min(budget, self.dead)
        self.dead -= pruned
        return pruned


class StopAfter:
    """An injected sleep that records each pause and sets ``stop`` after ``ticks`` of them."""

    def __init__(self, stop: asyncio.Event, ticks: int) -> None:
        self.stop = stop
        self.ticks = ticks
        self.pauses: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)
        if len(self.pauses) >= self.ticks:
            self.stop.set()


async def test_a_tick_prunes_each_store_within_its_budget() -> None:
    events, subscriptions = FakeStore(dead=1_200), FakeStore(dead=3)
    janitor = IndexJanitorService(
        {"events": events, "subscriptions": subscriptions},
        plan_janitor(budget=500),
        clock=FakeClock(),
    )

    first = await janitor.tick()

    assert first == JanitorTick({"events": 500, "subscriptions": 3})
    assert first.total == 503
    assert events.budgets == subscriptions.budgets == [500]
    assert (await janitor.tick()).pruned == {"events": 500, "subscriptions": 0}
    assert (await janitor.tick()).pruned == {"events": 200, "subscriptions": 0}


async def test_a_failing_store_is_logged_and_the_others_still_pruned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, healthy = FakeStore(dead=5, fails=1), FakeStore(dead=5)
    janitor = IndexJanitorService(
        {"events": broken, "subscriptions": healthy}, plan_janitor(), clock=FakeClock()
    )

    with caplog.at_level(logging.INFO, logger="plaita.janitor"):
        tick = await janitor.tick()
        [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert (await janitor.tick()).pruned == {"events": 5, "subscriptions": 0}

    assert tick == JanitorTick({"subscriptions": 5}, failed=("events",))
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "event=store.unreachable" in record.message
    assert "loop=index_janitor.events error=ConnectionError" in record.message
    assert "at most 60 s apart" in record.message
    [recovered] = [r.getMessage() for r in caplog.records if "store.recovered" in r.getMessage()]
    assert "failures=1" in recovered


async def test_run_ticks_once_per_interval_until_stopped_without_sleeping() -> None:
    store = FakeStore(dead=2_000)
    stop = asyncio.Event()
    sleep = StopAfter(stop, ticks=3)
    janitor = IndexJanitorService(
        {"events": store},
        plan_janitor(interval_seconds=15, budget=400),
        clock=FakeClock(),
        sleep=sleep,
    )

    await asyncio.wait_for(janitor.run(stop), timeout=5)

    assert store.budgets == [400, 400, 400]
    assert sleep.pauses == [15.0, 15.0, 15.0]
    assert store.dead == 800


async def test_a_stop_ends_the_pause_at_once() -> None:
    """The loop waits for the stop event too: a shutdown never waits out an interval."""
    store = FakeStore()
    stop = asyncio.Event()
    started = asyncio.Event()

    async def forever(seconds: float) -> None:
        started.set()
        await asyncio.Event().wait()

    janitor = IndexJanitorService(
        {"events": store}, plan_janitor(interval_seconds=3600), clock=FakeClock(), sleep=forever
    )
    running = asyncio.create_task(janitor.run(stop))
    await asyncio.wait_for(started.wait(), timeout=5)

    stop.set()

    await asyncio.wait_for(running, timeout=5)
    assert store.budgets == [500]


async def test_an_unusable_interval_runs_on_the_default_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    sleep = StopAfter(stop, ticks=1)
    janitor = IndexJanitorService(
        {"events": FakeStore()},
        plan_janitor(interval_seconds=float("inf")),
        clock=FakeClock(),
        sleep=sleep,
    )

    with caplog.at_level(logging.WARNING, logger="plaita.janitor"):
        await asyncio.wait_for(janitor.run(stop), timeout=5)

    assert sleep.pauses == [DEFAULT_INTERVAL_SECONDS]
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "setting=janitor_interval_seconds value=inf used=60.0" in record.message


async def test_a_disabled_janitor_warns_and_never_prunes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(dead=10)
    sleep = StopAfter(asyncio.Event(), ticks=1)
    janitor = IndexJanitorService(
        {"events": store}, plan_janitor(enabled=False), clock=FakeClock(), sleep=sleep
    )

    with caplog.at_level(logging.WARNING, logger="plaita.janitor"):
        await asyncio.wait_for(janitor.run(asyncio.Event()), timeout=5)

    assert store.budgets == [] and sleep.pauses == []
    [record] = caplog.records
    assert "setting=janitor_enabled" in record.message
    assert "only when a listing reads them" in record.message


async def test_a_tick_that_prunes_logs_what_and_how_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    janitor = IndexJanitorService({"events": FakeStore(dead=7)}, plan_janitor(), clock=FakeClock())

    with caplog.at_level(logging.INFO, logger="plaita.janitor"):
        await janitor.tick()

    [record] = caplog.records
    assert record.message.startswith("event=janitor.tick pruned=7 events=7 took_ms=")


# --- as the container wires it (entrypoints/janitor.py) -----------------------------------


async def test_the_container_wires_every_store_and_the_settings_plan(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PLAITA_JANITOR_* reach the plan (an unusable one falls back, with its WARNING) and a
    tick prunes the event log, the subscription store and the executions index (S1) the rest
    of plaita uses."""
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.janitor import run_index_janitor
    from plaita.entrypoints.settings import Settings

    container = build_container(
        Settings(backend="memory", janitor_interval_seconds=0, janitor_budget=42)
    )
    janitor = container.index_janitor()

    assert (janitor.plan.interval_seconds, janitor.plan.budget) == (60.0, 42)
    assert (await janitor.tick()).pruned == {"subscriptions": 0, "events": 0, "executions": 0}
    with caplog.at_level(logging.WARNING, logger="plaita.janitor"):
        stop = asyncio.Event()
        stop.set()
        await asyncio.wait_for(run_index_janitor(container, stop), timeout=5)
    assert [r.message.split(":")[0] for r in caplog.records] == [
        "event=config.fallback setting=janitor_interval_seconds value=0.0 used=60.0"
    ]


async def test_with_sql_storage_the_janitor_leaves_the_executions_to_the_state_sweep(
    tmp_path: Path,
) -> None:
    """SQL listings are queries on live rows: nothing to prune, the sweep removes rows."""
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.settings import Settings

    settings = Settings(
        backend="memory", storage="sql", database_url=f"sqlite:///{tmp_path / 'p.db'}"
    )
    janitor = build_container(settings).index_janitor()

    assert set((await janitor.tick()).pruned) == {"subscriptions", "events"}


async def test_the_container_can_switch_the_janitor_off() -> None:
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.janitor import run_index_janitor
    from plaita.entrypoints.settings import Settings

    container = build_container(Settings(backend="memory", janitor_enabled=False))

    # Returns at once although nothing ever sets the stop event.
    await asyncio.wait_for(run_index_janitor(container, asyncio.Event()), timeout=5)
    assert container.index_janitor().plan.enabled is False
