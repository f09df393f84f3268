"""The SQL state sweep as a background job (S4): bounded passes, failures never fatal."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from plaita.application.outages import StoreOutages
from plaita.entrypoints.janitor import run_state_sweeper


class Clock:
    def now_ms(self) -> int:
        return 1_000


class Sweeping:
    def __init__(self, answers: list[Any], stop: asyncio.Event) -> None:
        self.answers = answers
        self.calls: list[tuple[int, int]] = []
        self.stop = stop

    async def sweep_expired(self, *, now_ms: int, limit: int) -> int:
        self.calls.append((now_ms, limit))
        answer = self.answers.pop(0)
        if not self.answers:
            self.stop.set()
        if isinstance(answer, Exception):
            raise answer
        return int(answer)


class Container:
    def __init__(self, executions: object) -> None:
        self._executions = executions

    def executions(self) -> object:
        return self._executions

    def clock(self) -> Clock:
        return Clock()

    def outages(self) -> StoreOutages:
        return StoreOutages("the database", log=logging.getLogger("plaita.janitor"))


async def test_a_full_pass_goes_again_and_a_failed_one_is_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    store = Sweeping([3, ConnectionError("database restarting"), 2], stop)
    with caplog.at_level(logging.INFO, logger="plaita.janitor"):
        await asyncio.wait_for(
            run_state_sweeper(Container(store), stop, every_seconds=0.01, limit=3),  # type: ignore[arg-type]
            timeout=5,
        )

    assert store.calls == [(1_000, 3)] * 3
    assert any(
        "event=store.unreachable" in r.message and "loop=state_sweeper" in r.message
        for r in caplog.records
    )
    assert any("event=store.recovered" in r.message for r in caplog.records)
    assert any("sweep.done removed=3" in r.message for r in caplog.records)


async def test_without_sql_storage_there_is_nothing_to_sweep() -> None:
    await asyncio.wait_for(
        run_state_sweeper(Container(object()), asyncio.Event()),  # type: ignore[arg-type]
        timeout=1,
    )
