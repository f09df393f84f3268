"""What background loops log during a store outage: one WARNING, counts, one INFO, no trace."""

from __future__ import annotations

import logging

import pytest

from plaita.application.outages import StoreOutages
from plaita.domain.outages import Backoff

from .conftest import FakeClock

BACKOFF = Backoff(base_ms=100, cap_ms=5_000)


class StoreDown(ConnectionError):
    """What a client raises while its store is unreachable."""


@pytest.fixture
def outages(clock: FakeClock) -> StoreOutages:
    return StoreOutages(
        "redis", log=logging.getLogger("plaita.test.outages"), monotonic=clock.monotonic
    )


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "plaita.test.outages"]


def test_an_outage_seen_by_many_loops_logs_one_warning_and_one_info_without_traceback(
    outages: StoreOutages, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    timers = outages.loop("timers", consequence="due timers wait", backoff=BACKOFF)
    reads = outages.loop("read", consequence="nothing new is read", backoff=BACKOFF)
    caplog.set_level(logging.DEBUG, logger="plaita.test.outages")

    for _ in range(20):
        timers.failed(StoreDown("Connection refused"))
        reads.failed(TimeoutError("timed out"))
        clock.advance(0.25)
    timers.succeeded()
    reads.succeeded()
    timers.succeeded()

    loud = [r for r in records(caplog) if r.levelno >= logging.INFO]
    assert [(r.levelname, r.getMessage().split()[0]) for r in loud] == [
        ("WARNING", "event=store.unreachable"),
        ("INFO", "event=store.recovered"),
    ]
    assert all(r.exc_info is None for r in records(caplog))
    warning, info = (r.getMessage() for r in loud)
    assert (
        "loop=timers" in warning
        and "due timers wait" in warning
        and "Connection refused" in warning
    )
    assert "failures=40 outage_s=5.0 loops=read:20,timers:20" in info


def test_a_loop_waits_longer_after_each_failure_up_to_the_cap_and_starts_over(
    outages: StoreOutages,
) -> None:
    loop = outages.loop("gauges", consequence="gauges are stale", backoff=BACKOFF)
    waits = [loop.failed(StoreDown()) for _ in range(8)]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    loop.succeeded()
    assert loop.failed(StoreDown()) == 0.1


def test_the_outage_ends_only_when_every_loop_that_failed_worked_again(
    outages: StoreOutages, caplog: pytest.LogCaptureFixture
) -> None:
    timers = outages.loop("timers", consequence="due timers wait", backoff=BACKOFF)
    heartbeat = outages.loop("heartbeat", consequence="the record ages", backoff=BACKOFF)
    caplog.set_level(logging.INFO, logger="plaita.test.outages")
    timers.failed(StoreDown())
    heartbeat.failed(StoreDown())
    caplog.clear()

    timers.succeeded()
    assert not records(caplog)
    heartbeat.succeeded()
    assert [r.getMessage().split()[0] for r in records(caplog)] == ["event=store.recovered"]


def test_an_unexpected_error_logs_its_traceback_once_per_streak_and_its_recovery(
    outages: StoreOutages, caplog: pytest.LogCaptureFixture
) -> None:
    loop = outages.loop("timers", consequence="due timers wait", backoff=BACKOFF)
    caplog.set_level(logging.INFO, logger="plaita.test.outages")

    for _ in range(5):
        try:
            raise KeyError("a bug")
        except KeyError as exc:
            loop.failed(exc)
    loop.succeeded()

    logged = [
        (r.levelname, r.getMessage().split()[0], r.exc_info is not None) for r in records(caplog)
    ]
    assert logged == [
        ("WARNING", "event=loop.failed", True),
        ("INFO", "event=loop.recovered", False),
    ]
    assert "failures=5" in records(caplog)[-1].getMessage()
    assert outages.health.outage is None, "a bug is not a store outage"


def test_the_errors_that_mean_unreachable_are_chosen_by_the_process(clock: FakeClock) -> None:
    class ClientDown(Exception):
        """A client library's own connection error, unrelated to OSError."""

    outages = StoreOutages(
        "redis",
        log=logging.getLogger("plaita.test.outages"),
        expected=(ClientDown,),
        monotonic=clock.monotonic,
    )
    assert outages.expects(ClientDown()) and not outages.expects(ConnectionError())
