"""The worker's timer mover through a store outage: it backs off, logs the outage once
without a traceback, says when the store is back, and moves the timers that waited."""

from __future__ import annotations

import asyncio
import logging

import attrs
import pytest

from plaita.application.outages import StoreOutages
from plaita.entrypoints.outages import UNREACHABLE
from plaita.entrypoints.worker_chores import TIMERS_BACKOFF, move_due_timers

from ..application.conftest import FakeClock


class RedisDown(ConnectionError):
    """What the delay queue raises while Redis is stopped."""


@attrs.define
class OutageDelayQueue:
    """A delay queue whose store is down for the first ``down_for`` moves."""

    down_for: int
    moves: int = 0
    moved: int = 0

    async def move_due(self, *, now_ms: int) -> int:
        self.moves += 1
        if self.moves <= self.down_for:
            raise RedisDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.moved += 1
        return 1 if self.moved == 1 else 0


@attrs.define
class Waits:
    """The injected pause: records each wait, advances the clock, stops after ``limit``."""

    clock: FakeClock
    stop: asyncio.Event
    limit: int
    seconds: list[float] = attrs.field(factory=list)

    async def __call__(self, stop: asyncio.Event, seconds: float) -> None:
        self.seconds.append(seconds)
        self.clock.advance(seconds)
        if len(self.seconds) >= self.limit:
            self.stop.set()
        await asyncio.sleep(0)


async def test_a_store_outage_backs_the_timer_mover_off_and_is_logged_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue: the mover logged an ERROR with a traceback ~10 times a second during an outage."""
    clock, stop = FakeClock(), asyncio.Event()
    delay = OutageDelayQueue(down_for=12)
    waits = Waits(clock, stop, limit=14)
    outages = StoreOutages(
        "redis",
        log=logging.getLogger("plaita.outages"),
        expected=UNREACHABLE,
        monotonic=clock.monotonic,
    )
    loop = outages.loop("timers", consequence="due timers wait", backoff=TIMERS_BACKOFF)

    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(
            move_due_timers(
                delay,
                clock,
                stop,
                read_block_ms=1000,
                outage=loop,
                wait=waits,  # type: ignore[arg-type]
            ),
            5,
        )

    assert waits.seconds[:12] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]
    assert waits.seconds[12:] == [0.1, 0.1], "back to its pace once the store answered"
    assert delay.moved >= 2, "the due timers were moved once the store answered"
    logged = [(r.levelname, r.getMessage().split()[0]) for r in caplog.records]
    assert logged == [("WARNING", "event=store.unreachable"), ("INFO", "event=store.recovered")]
    assert all(r.exc_info is None for r in caplog.records)
    assert "failures=12 outage_s=36.3" in caplog.records[1].getMessage()
