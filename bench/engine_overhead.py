"""Engine overhead per no-op node, in µs: Normal mode, Distributed steps, the worker step.

A flow of N no-op task nodes and one end node runs once per repetition; the time of the run
divided by its N + 1 nodes is one sample. Each mode reports the median and p90 of its
samples. What is measured is the engine itself (no Redis, no network):

- ``normal``: ``FlowExecution.arun`` over the chain, in one process (``plaita run``).
- ``distributed``: one ``arun_distributed`` call per node, on a fresh ``FlowExecution``
  whose context is restored from its JSON between steps, as a worker restores it from the
  checkpoint.
- ``process-task``: the worker step (``ProcessTask``) on the memory twin, as the container
  wires it (pause gate, tombstone, attempts included): lease, load,
  advance, checkpoint (JSON), release. ``1 dispatch`` runs the whole chain in one dispatch
  (a checkpoint per node); ``1 node/dispatch`` hands over to a fresh carrier after every
  node (enqueue, read, ack through the memory queue), as a worker does between resumes.

Every mode runs with a sync and an async handler. Bounded: after one warm-up run of every
mode, at most ``--repeats`` rounds (one run of every mode each); once ``--min-repeats``
rounds are done, no round starts that would end after ``--max-seconds`` (counted from the
start, set-up and warm-up included).

    .venv/bin/python bench/engine_overhead.py              # 20 nodes, about 40 s at most
    .venv/bin/python bench/engine_overhead.py --nodes 200 --repeats 20

Performance is measured here, never in timed unit tests (the P requirements).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from dependency_injector import providers

from plaita.application.engine.context import ExecutionContext
from plaita.application.engine.execution import FlowExecution, RunOptions
from plaita.application.handlers import HandlerRegistry
from plaita.application.tenancy import tenant_scope
from plaita.application.use_cases.step import Disposition
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.execution import Suspension
from plaita.domain.flow import EventNode, Flow, SleepNode
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.container import build_container
from plaita.entrypoints.settings import Settings

JSON = Any
Run = Callable[[], Awaitable[int]]  # runs one execution, returns the number of nodes it ran


def noop_sync(params: JSON, ctx: Any) -> JSON:
    return None


async def noop_async(params: JSON, ctx: Any) -> JSON:
    return None


HANDLERS = HandlerRegistry(
    ["bench"],
    importer=lambda name: types.SimpleNamespace(noop_sync=noop_sync, noop_async=noop_async),
)


def chain(nodes: int, handler: str) -> Flow:
    """``nodes`` no-op task nodes in a row, then an end node."""
    ids = [f"n{i}" for i in range(nodes)]
    document = {
        "flow_id": f"chain_{handler}",
        "start": ids[0],
        "nodes": [
            {"id": node, "type": "task", "handler": f"bench:{handler}", "next": following}
            for node, following in zip(ids, [*ids[1:], "done"], strict=True)
        ]
        + [{"id": "done", "type": "end"}],
    }
    return Flow.from_document(document)


class NoWaits:
    """The chain has no event or sleep node: nothing ever registers a suspension."""

    async def register_event_wait(self, node: EventNode, context: ExecutionContext) -> Suspension:
        raise AssertionError("no event nodes in the benchmark chain")

    async def register_timer(self, node: SleepNode, context: ExecutionContext) -> Suspension:
        raise AssertionError("no sleep nodes in the benchmark chain")


#: The clock and ids every mode uses: the container's, as in every plaita process.
_SYSTEM = build_container(Settings(backend="memory"))
CLOCK = _SYSTEM.clock()
IDS = _SYSTEM.ids()


def normal(flow: Flow) -> Run:
    async def run() -> int:
        execution = FlowExecution(
            flow,
            ExecutionContext(execution_id=IDS.new_id(), flow_id=flow.flow_id),
            handlers=HANDLERS,
            clock=CLOCK,
            new_id=IDS.new_id,
        )
        await execution.arun()
        return len(execution.context.node_results)

    return run


def distributed(flow: Flow) -> Run:
    registrar = NoWaits()
    options = RunOptions(mode="distributed")

    async def run() -> int:
        checkpoint = json.dumps(
            ExecutionContext(execution_id=IDS.new_id(), flow_id=flow.flow_id).to_json()
        )
        node_id: str | None = flow.start_node.id
        steps = 0
        while node_id is not None:
            context = ExecutionContext.from_json(json.loads(checkpoint))
            execution = FlowExecution(
                flow, context, handlers=HANDLERS, clock=CLOCK, new_id=IDS.new_id, options=options
            )
            output = await execution.arun_distributed(
                node_id=node_id, resume=None, registrar=registrar
            )
            checkpoint = json.dumps(context.to_json())
            node_id = None if output.is_end else output.next_node_id
            steps += 1
        return steps

    return run


class Twin:
    """The worker step on the memory twin, wired by the container as ``plaita dev`` is."""

    def __init__(self, flow: Flow, *, nodes_per_dispatch: int) -> None:
        self.flow = flow
        container = build_container(
            Settings(backend="memory", consumer_name="bench-worker", handler_modules=("bench",))
        )
        container.handlers.override(providers.Object(HANDLERS))
        settings = attrs.evolve(
            container.step_settings(), max_steps_per_dispatch=nodes_per_dispatch
        )
        container.step_settings.override(providers.Object(settings))
        self.generations = container.generations()
        self.queue = container.queue()
        self.executions = container.executions()
        self.catalog = container.flows()
        self.process = container.process_task()

    async def setup(self) -> None:
        await self.catalog.register(self.flow, owner=SHARED)
        await self.queue.ensure_group()

    async def run(self) -> int:
        execution_id = IDS.new_id()
        await self.queue.enqueue(
            TaskEnvelope.start(
                execution_id=execution_id,
                flow_id=self.flow.flow_id,
                version=self.flow.version,
                params={},
                now_ms=CLOCK.now_ms(),
                generations=self.generations,
            )
        )
        outcome = "started"
        while outcome != "completed":
            [delivery] = await self.queue.read("bench", count=1, block_ms=1)
            assert delivery.envelope is not None
            result = await self.process(delivery.envelope)
            if result.disposition is not Disposition.ACK:
                raise RuntimeError(f"unexpected dispatch result {result}")
            await self.queue.ack(delivery.message_id)
            outcome = result.outcome
        with tenant_scope(DEFAULT_TENANT):
            state = await self.executions.load(execution_id)
        if state is None or state.status.value != "completed":
            raise RuntimeError(f"execution {execution_id} did not complete: {state}")
        return state.steps


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(
    runs: list[Run], *, repeats: int, min_repeats: int, deadline: float
) -> list[list[float]]:
    """µs per node of each repetition of each run, after one warm-up run of each.

    Rounds interleave the modes (one repetition of each per round) so that a change in the
    machine's load spreads over all of them. No round starts after ``repeats`` rounds, nor
    (once ``min_repeats`` are done) when the last round's length would overrun ``deadline``
    (a ``time.monotonic()`` value).
    """
    for run in runs:
        await run()
    samples: list[list[float]] = [[] for _ in runs]
    for round_number in range(1, repeats + 1):
        round_started = time.monotonic()
        for run, collected in zip(runs, samples, strict=True):
            gc.collect()
            started = time.perf_counter_ns()
            nodes = await run()
            collected.append((time.perf_counter_ns() - started) / 1000 / nodes)
        now = time.monotonic()
        if round_number >= min_repeats and now + (now - round_started) > deadline:
            break
    return samples


async def main_async(args: argparse.Namespace) -> list[tuple[str, str, list[float]]]:
    deadline = time.monotonic() + args.max_seconds
    modes: list[tuple[str, str, Run]] = []
    for kind in ("sync", "async"):
        flow = chain(args.nodes, f"noop_{kind}")
        whole = Twin(flow, nodes_per_dispatch=args.nodes + 1)
        stepwise = Twin(flow, nodes_per_dispatch=1)
        for twin in (whole, stepwise):
            await twin.setup()
        modes += [
            ("normal (FlowExecution.arun)", kind, normal(flow)),
            ("distributed (arun_distributed per node)", kind, distributed(flow)),
            ("process-task, 1 dispatch", kind, whole.run),
            ("process-task, 1 node/dispatch", kind, stepwise.run),
        ]
    samples = await measure(
        [run for _, _, run in modes],
        repeats=args.repeats,
        min_repeats=args.min_repeats,
        deadline=deadline,
    )
    return [(name, kind, got) for (name, kind, _), got in zip(modes, samples, strict=True)]


def table(results: list[tuple[str, str, list[float]]], nodes: int) -> str:
    lines = [
        f"| mode ({nodes} no-op tasks + end) | handler | runs | median µs/node | p90 µs/node |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, kind, samples in results:
        lines.append(
            f"| {name} | {kind} | {len(samples)} | {statistics.median(samples):.1f} "
            f"| {percentile(samples, 0.9):.1f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20, help="no-op task nodes in the chain")
    parser.add_argument("--repeats", type=int, default=60, help="timed runs per mode (max)")
    parser.add_argument("--min-repeats", type=int, default=5, help="timed runs per mode (min)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=40.0,
        help="time budget for the whole run; --min-repeats rounds are always done",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 5000:
        parser.error("--nodes must be between 1 and 5000")
    if not 1 <= args.min_repeats <= args.repeats:
        parser.error("need 1 <= --min-repeats <= --repeats")
    if not 0 < args.max_seconds <= 600:
        parser.error("--max-seconds must be in (0, 600]")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    results = asyncio.run(main_async(args))
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(
        f"plaita engine overhead — python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}, load average {load}, "
        f"{time.monotonic() - started:.1f} s"
    )
    print()
    print(table(results, args.nodes))


if __name__ == "__main__":
    main()
