"""How fast ``ExecutionHandle.result()`` answers, through the Python API (issue 15).

One process: a ``plaita.Client`` with an embedded ``plaita.Worker`` (worker loop and event
filter in this event loop), on the memory twin or on a Redis. Two figures, each over
``--runs`` executions after ``--warmup`` ones:

- **start → result**: ``client.start`` of a flow ``step`` (a no-op task) → ``done``, then
  ``await handle.result()``; the time from before ``start`` to ``result`` returning: the
  start carrier, one dispatch, the terminal checkpoint, its end notice, the waiter's re-read.
- **publish → result**: an execution already suspended on an event node; the time from
  before ``client.publish`` to ``result`` returning (the result is being awaited already):
  the publish, the event filter, the resume carrier, the dispatch, the end notice.

The fallback re-read of ``result()`` is every 2 s, so a figure in milliseconds shows the
notice at work. Run:

    .venv/bin/python bench/result_latency.py                      # memory://
    .venv/bin/python bench/result_latency.py --url redis://127.0.0.1:6379/15
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import plaita


def noop(params: dict[str, Any], ctx: Any) -> None:
    return None


FLOW = (
    plaita.Flow("bench_result")
    .task("step", "bench.result_latency:noop", next="done")
    .end("done", output="'ok'")
)
WAITING = (
    plaita.Flow("bench_result_event")
    .event("wait", "bench.go", next="done")
    .end("done", output="$NODE['wait']['data']")
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(url: str, runs: int, warmup: int) -> dict[str, list[float]]:
    os.environ.setdefault("PLAITA_NAMESPACE", f"plaita-bench-{uuid.uuid4().hex[:8]}")
    figures: dict[str, list[float]] = {"start → result": [], "publish → result": []}
    async with (
        plaita.Client(url) as client,
        plaita.Worker(client, handler_modules=["bench.result_latency"]),
    ):
        await client.register(FLOW)
        await client.register(WAITING)
        for i in range(warmup + runs):
            began = time.perf_counter()
            handle = await client.start("bench_result")
            assert await handle.result(timeout=10) == "ok"
            if i >= warmup:
                figures["start → result"].append((time.perf_counter() - began) * 1000)
        for i in range(warmup + runs):
            handle = await client.start("bench_result_event")
            waiting = asyncio.create_task(handle.result(timeout=10))
            while True:  # suspended on its event node
                try:
                    if await handle.status() is plaita.ExecutionStatus.SUSPENDED:
                        break
                except plaita.PlaitaError:
                    pass
                await asyncio.sleep(0.005)
            began = time.perf_counter()
            await client.publish("bench.go", {"n": i}, correlation_id=handle.execution_id)
            assert await waiting == {"n": i}
            if i >= warmup:
                figures["publish → result"].append((time.perf_counter() - began) * 1000)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    options = parser.parse_args()
    figures = asyncio.run(measure(options.url, options.runs, options.warmup))
    print(
        f"Machine: nproc={os.cpu_count()}, {platform.python_implementation()} "
        f"{platform.python_version()}; url={options.url}; runs={options.runs}"
    )
    print("| figure | p50 ms | p90 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, values in figures.items():
        print(
            f"| {name} | {statistics.median(values):.2f} | {percentile(values, 0.9):.2f} | "
            f"{percentile(values, 0.99):.2f} | {max(values):.2f} |"
        )


if __name__ == "__main__":
    main()
