"""Priorities with a real ``plaita worker`` on a real Redis: high-priority starts overtake a
low-priority backlog that was queued before them (the start option ``priority``).

A backlog of low starts and then a few high ones are queued while no worker runs; one worker
with a small concurrency then takes them. Each run appends its label to a Redis list as it
starts, so the order is the worker's own. The bound on how many lows may start before the
last high comes from the domain's share: the lows a worker reading one carrier at a time
takes before the last high, plus one for the carriers a read of ``--concurrency`` takes at
once (two handlers start in either order).
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from plaita.domain.priorities import Priority, take_in_priority_order

from . import priority_handlers
from .conftest import Plaita, requires_redis

pytestmark = [requires_redis, pytest.mark.process, pytest.mark.timeout(120)]

FLOW_FILE = "tests/integration/priority_flows/priority_mark.json"
HANDLER_MODULE = "tests.integration.priority_handlers"
LOWS, HIGHS, CONCURRENCY = 40, 4, 2


def start(plaita: Plaita, labels: list[str], priority: str) -> None:
    """Start one execution per label, through the start use case ``plaita executions start
    --priority`` calls (without a process start each)."""
    from plaita.application.tenancy import tenant_scope
    from plaita.entrypoints.container import build_container

    async def start_all() -> None:
        container = build_container(plaita.settings())
        try:
            begin = container.start_execution()
            with tenant_scope("default"):
                for label in labels:
                    await begin("priority_mark", params={"label": label}, priority=priority)
        finally:
            await container.redis_client().aclose()

    asyncio.run(start_all())


def lows_before_the_last_high(highs: int, lows: int) -> int:
    """What the domain's share lets pass first: reads of one, from the first turn."""
    ready = {Priority.HIGH: highs, Priority.NORMAL: 0, Priority.LOW: lows}
    turn = passed = 0
    while ready[Priority.HIGH]:
        decision = take_in_priority_order(1, ready, turn)
        turn = decision.next_turn
        for level, taken in decision.taken.items():
            ready[level] -= taken
        passed += decision.taken[Priority.LOW]
    return passed


def test_high_starts_overtake_a_queued_low_backlog(plaita: Plaita) -> None:
    plaita.run("flows", "register", FLOW_FILE, "--handler-modules", HANDLER_MODULE)
    start(plaita, [f"low-{n}" for n in range(LOWS)], "low")
    start(plaita, [f"high-{n}" for n in range(HIGHS)], "high")
    done = plaita.run(
        "executions",
        "start",
        "priority_mark",
        "--input",
        '{"label": "high-cli"}',
        "--priority",
        "high",
    )
    assert done.stdout.strip()

    worker = plaita.spawn(
        "worker",
        "worker",
        "--handler-modules",
        HANDLER_MODULE,
        "--concurrency",
        str(CONCURRENCY),
        "--read-block-ms",
        "100",
    )
    order = poll_order(plaita, worker, LOWS + HIGHS + 1)
    plaita.stop(worker)

    last_high = max(i for i, label in enumerate(order) if label.startswith("high"))
    lows_first = sum(1 for label in order[:last_high] if label.startswith("low"))
    bound = lows_before_the_last_high(HIGHS + 1, LOWS) + CONCURRENCY - 1
    assert lows_first <= bound, (lows_first, bound, order)
    assert sorted(order) == sorted(
        [f"low-{n}" for n in range(LOWS)] + [f"high-{n}" for n in range(HIGHS)] + ["high-cli"]
    ), "every start ran once"


def poll_order(plaita: Plaita, worker: subprocess.Popen[bytes], expected: int) -> list[str]:
    key = priority_handlers.order_key(plaita.namespace)
    deadline = time.monotonic() + 60
    order: list[str] = []
    while time.monotonic() < deadline:
        assert worker.poll() is None, f"the worker exited\n{plaita.logs()}"
        order = [str(label) for label in plaita.redis().lrange(key, 0, -1)]
        if len(order) >= expected:
            return order
        time.sleep(0.2)
    raise AssertionError(f"only {len(order)} of {expected} runs started\n{plaita.logs()}")
