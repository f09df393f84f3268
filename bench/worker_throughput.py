"""Durable steps per second of worker processes on a real Redis or Redis Cluster (P1, K1).

One run: in a fresh namespace, register a flow of N no-op async task nodes and an end node,
enqueue E start carriers on the Redis task queue, then run the worker — the real
``entrypoints.worker.Worker`` loop, wired by ``build_container`` for the Redis backend as
``plaita worker`` wires it (dead-letter guard, leases, registry record, delay queue) — until
every execution is completed. The handler comes from a tiny module the script provides
through the container's ``handlers`` provider (a ``HandlerRegistry`` with an importer).
``--workers K`` (K > 1) runs K worker processes instead of one in this process, each with its
own container and consumer name; ``--redis-cluster`` makes ``--redis-url`` a seed node of a
Redis Cluster (as ``plaita worker --redis-cluster`` does).

Reported per run:

- wall time: from the worker's start to the last execution's completing checkpoint (its
  ``updated_at_ms``), so the completion poll's interval does not count;
- durable steps/s: E x (N + 1) nodes / wall time (every node is checkpointed);
- execution latency p50/p99, enqueue → completed (all E are enqueued before the worker
  starts, so this includes the wait in the stream) and in the worker (first checkpoint →
  completed).

Completion is polled every ``--poll-ms`` with one pipelined ``HGET status`` per outstanding
execution; afterwards every execution is loaded through the ``ExecutionRepository`` and
must be ``completed`` with N + 1 steps. A run stops by itself after ``--timeout`` seconds
whatever happened; the namespace is deleted at the end of each run.

    .venv/bin/python bench/worker_throughput.py                  # 3 runs, 200 x 10, ≤ ~90 s
    .venv/bin/python bench/worker_throughput.py --concurrency 16 --runs 1
    .venv/bin/python bench/worker_throughput.py --runs 1 --profile   # + cProfile top 10
    .venv/bin/python bench/worker_throughput.py --redis-url redis://127.0.0.1:7000 \
        --redis-cluster --workers 2                                   # the cluster, 2 workers
    .venv/bin/python bench/worker_throughput.py --runs 1 --json     # one JSON object (bench/peers)

Performance is measured here, never in timed unit tests (the P requirements).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import multiprocessing
import os
import platform
import pstats
import statistics
import sys
import time
import types
import uuid
from typing import Any

import attrs
import redis.asyncio as redis
from dependency_injector import providers

from plaita.adapters.redis.keys import RedisKeys
from plaita.application.handlers import HandlerRegistry
from plaita.application.tenancy import tenant_scope
from plaita.domain.envelope import TaskEnvelope
from plaita.domain.execution import ExecutionStatus
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED
from plaita.domain.tenancy import DEFAULT_TENANT
from plaita.entrypoints.container import Container, build_container
from plaita.entrypoints.settings import Settings

HANDLER_MODULE = "plaita_bench_noop"


async def noop(params: Any, ctx: Any) -> None:
    return None


#: The module the handlers are imported from; only the container's registry ever sees it.
NOOP_MODULE = types.SimpleNamespace(noop=noop)


def chain(nodes: int, concurrency_limit: int | None = None) -> Flow:
    """``nodes`` no-op async task nodes in a row, then an end node; with
    ``concurrency_limit``, at most that many executions of the flow run at once (E1a)."""
    ids = [f"n{i}" for i in range(nodes)]
    document: dict[str, Any] = {
        "flow_id": f"bench_chain_{nodes}",
        "version": "1",
        "start": ids[0],
        "nodes": [
            {"id": node, "type": "task", "handler": f"{HANDLER_MODULE}:noop", "next": following}
            for node, following in zip(ids, [*ids[1:], "done"], strict=True)
        ]
        + [{"id": "done", "type": "end"}],
    }
    if concurrency_limit is not None:
        document["concurrency"] = {"limit": concurrency_limit}
    return Flow.from_document(document)


@attrs.frozen
class RunResult:
    executions: int
    completed: int
    steps: int
    wall_seconds: float
    enqueue_latency_ms: list[float]
    worker_latency_ms: list[float]
    #: CPU seconds per wall second while the run went on (poll included), of this process
    #: and of the Redis server (all its clients).
    worker_cpu: float
    redis_cpu: float
    problem: str | None = None
    #: The same CPU of the bench and its worker processes, and of Redis, in seconds.
    worker_cpu_seconds: float = 0.0
    redis_cpu_seconds: float = 0.0

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.wall_seconds if self.wall_seconds > 0 else 0.0


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def container_for(
    args: argparse.Namespace, namespace: str, worker: int = 0
) -> tuple[Settings, Container]:
    settings = Settings(
        backend="redis",
        redis_url=args.redis_url,
        redis_cluster=args.redis_cluster,
        partitions=args.partitions,
        namespace=namespace,
        handler_modules=(HANDLER_MODULE,),
        concurrency=args.concurrency,
        read_block_ms=args.read_block_ms,
        consumer_name=f"{namespace}-worker-{worker}",
        drain_timeout_seconds=5.0,
    )
    container = build_container(settings)
    container.handlers.override(
        providers.Object(HandlerRegistry([HANDLER_MODULE], importer=lambda _: NOOP_MODULE))
    )
    return settings, container


async def wait_completed(
    client: redis.Redis, keys: RedisKeys, ids: list[str], *, poll_s: float, deadline: float
) -> int:
    """Poll until every execution is terminal or ``deadline``; how many are terminal."""
    outstanding = list(ids)
    terminal = {status.value for status in ExecutionStatus if status.is_terminal}
    while outstanding and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        try:
            async with client.pipeline(transaction=False) as pipe:
                for execution_id in outstanding:
                    pipe.hget(keys.execution_state(execution_id), "status")
                statuses = await pipe.execute()
        except redis.RedisError as exc:
            print(f"completion poll failed: {exc!r}; polling again", file=sys.stderr)
            continue
        outstanding = [
            execution_id
            for execution_id, status in zip(outstanding, statuses, strict=True)
            if status is None or json.loads(status) not in terminal
        ]
    return len(ids) - len(outstanding)


async def delete_namespace(client: redis.Redis, namespace: str) -> int:
    deleted = 0
    batch: list[str] = []
    async for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += await client.unlink(*batch)
            batch.clear()
    if batch:
        deleted += await client.unlink(*batch)
    return deleted


def observer_client(args: argparse.Namespace) -> redis.Redis:
    """The poll's, the CPU probe's and the clean-up's own client: not the worker's pool."""
    if args.redis_cluster:
        cluster = redis.RedisCluster.from_url(args.redis_url, decode_responses=True)
        return cluster  # type: ignore[return-value]
    return redis.Redis.from_url(args.redis_url, decode_responses=True)


def worker_process(
    args: argparse.Namespace, namespace: str, number: int, ready: Any, go: Any, stop: Any
) -> None:
    """A worker process of a ``--workers K`` run: its own container, built and connected
    before the clock starts (``ready``), working from ``go`` until ``stop`` is set."""

    async def run() -> None:
        _, container = container_for(args, namespace, number)
        worker = container.worker()
        await container.redis_client().ping()
        ready.set()
        await asyncio.to_thread(go.wait, 60)
        halt = asyncio.Event()
        running = asyncio.create_task(worker.run(halt))
        while not stop.is_set() and not running.done():
            await asyncio.sleep(0.02)
        halt.set()
        await asyncio.wait_for(running, 15)
        await container.redis_client().aclose()

    asyncio.run(run())


class Workers:
    """The run's workers: one ``Worker`` in this process, or ``--workers`` processes."""

    def __init__(self, args: argparse.Namespace, namespace: str, container: Container) -> None:
        self._args, self._namespace, self._container = args, namespace, container
        self._context = multiprocessing.get_context("spawn")
        self._stop_all = self._context.Event()
        self._go = self._context.Event()
        self._processes: list[Any] = []
        self._task: asyncio.Task[None] | None = None
        self._halt = asyncio.Event()

    async def prepare(self) -> None:
        """Worker processes started, their containers built and connected (not yet working)."""
        if self._args.workers == 1:
            return
        readies = []
        for number in range(self._args.workers):
            ready = self._context.Event()
            process = self._context.Process(
                target=worker_process,
                args=(self._args, self._namespace, number, ready, self._go, self._stop_all),
                daemon=True,
            )
            process.start()
            self._processes.append(process)
            readies.append(ready)
        for ready in readies:
            if not await asyncio.to_thread(ready.wait, 60):
                raise RuntimeError("a worker process was not ready within 60 s")

    def start(self) -> None:
        if self._args.workers == 1:
            self._task = asyncio.create_task(self._container.worker().run(self._halt))
        self._go.set()

    async def stop(self) -> None:
        self._halt.set()
        self._stop_all.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            if not self._task.done():
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for process in self._processes:
            await asyncio.to_thread(process.join, 20)
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 5)


async def one_run(args: argparse.Namespace, profiler: cProfile.Profile | None = None) -> RunResult:
    namespace = f"plaita-bench-{uuid.uuid4().hex[:12]}"
    _, container = container_for(args, namespace)
    observer = observer_client(args)
    try:
        await observer.ping()
        flow = (
            await container.flows().register(
                chain(args.nodes, args.concurrency_limit), owner=SHARED
            )
        ).flow
        queue = container.queue()
        await queue.ensure_group()
        # Worker processes start (imports, connections) before the carriers go in, so that
        # neither the wall time nor the enqueue → done latency counts their start-up.
        workers = Workers(args, namespace, container)
        await workers.prepare()
        new_id = container.ids().new_id
        ids: list[str] = []
        enqueued_ms: dict[str, int] = {}
        for _ in range(args.executions):
            execution_id = new_id()
            now_ms = time.time_ns() // 1_000_000
            await queue.enqueue(
                TaskEnvelope.start(
                    execution_id=execution_id,
                    flow_id=flow.flow_id,
                    version=flow.version,
                    params={},
                    now_ms=now_ms,
                    generations=container.generations(),
                )
            )
            ids.append(execution_id)
            enqueued_ms[execution_id] = now_ms

        deadline = time.monotonic() + args.timeout
        if profiler is not None:
            profiler.enable()
        redis_cpu = await redis_cpu_seconds(observer)
        cpu = process_cpu_seconds()
        started = time.monotonic()
        started_ms = time.time_ns() // 1_000_000
        workers.start()
        try:
            await wait_completed(
                observer,
                container.redis_keys(),
                ids,
                poll_s=args.poll_ms / 1000,
                deadline=deadline,
            )
            observed = time.monotonic() - started
            redis_cpu = await redis_cpu_seconds(observer) - redis_cpu
        finally:
            await workers.stop()
            if profiler is not None:
                profiler.disable()
        # Worker processes' CPU is known once they have exited (this process's included).
        cpu = process_cpu_seconds() - cpu

        executions = container.executions()
        states = [await executions.load(execution_id) for execution_id in ids]
        done = [
            state
            for state in states
            if state is not None and state.status is ExecutionStatus.COMPLETED
        ]
        problem = None
        wrong_steps = [state.execution_id for state in done if state.steps != args.nodes + 1]
        if len(done) < len(ids):
            problem = f"{len(ids) - len(done)} executions not completed after {args.timeout} s"
        elif wrong_steps:
            problem = f"{len(wrong_steps)} executions with steps != {args.nodes + 1}"
        last_ms = max((state.updated_at_ms for state in done), default=started_ms)
        return RunResult(
            executions=len(ids),
            completed=len(done),
            steps=sum(state.steps for state in done),
            wall_seconds=(last_ms - started_ms) / 1000,
            enqueue_latency_ms=[
                float(state.updated_at_ms - enqueued_ms[state.execution_id]) for state in done
            ],
            worker_latency_ms=[float(state.updated_at_ms - state.created_at_ms) for state in done],
            worker_cpu=cpu / observed,
            redis_cpu=redis_cpu / observed,
            problem=problem,
            worker_cpu_seconds=cpu,
            redis_cpu_seconds=redis_cpu,
        )
    finally:
        with contextlib.suppress(Exception):
            await delete_namespace(observer, namespace)
        await observer.aclose()
        with contextlib.suppress(Exception):
            await container.redis_client().aclose()


def process_cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the worker processes)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def per_node(info: dict[str, Any]) -> list[dict[str, Any]]:
    """INFO of one node, or of every primary of a cluster (a dict per node name)."""
    if "redis_version" in info or "used_cpu_user" in info:
        return [info]
    return [node for node in info.values() if isinstance(node, dict)]


async def redis_cpu_seconds(client: redis.Redis) -> float:
    """CPU seconds of the Redis server, or of every primary of the cluster, summed."""
    if isinstance(client, redis.RedisCluster):
        info = await client.info("cpu", target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        info = await client.info("cpu")
    nodes = per_node(info)
    return sum(float(node["used_cpu_user"]) + float(node["used_cpu_sys"]) for node in nodes)


async def redis_version(args: argparse.Namespace) -> str:
    client = observer_client(args)
    try:
        nodes = per_node(await client.info("server"))
        version = str(nodes[0].get("redis_version", "?")) if nodes else "?"
        return f"{version} cluster of {len(nodes)} primaries" if args.redis_cluster else version
    finally:
        await client.aclose()


def table(results: list[RunResult], args: argparse.Namespace) -> str:
    lines = [
        f"| run ({args.executions} x {args.nodes} no-op tasks + end, P={args.partitions}, "
        f"{args.workers} "
        f"worker{'s' if args.workers > 1 else ''} x concurrency {args.concurrency}) "
        "| completed | durable steps | wall s | steps/s "
        "| enqueue→done p50 / p99 ms | in worker p50 / p99 ms | CPU worker / redis |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def latencies(samples: list[float]) -> str:
        if not samples:
            return "-"
        return f"{percentile(samples, 0.5):.0f} / {percentile(samples, 0.99):.0f}"

    for number, result in enumerate(results, start=1):
        lines.append(
            f"| {number} | {result.completed}/{result.executions} | {result.steps} "
            f"| {result.wall_seconds:.2f} | {result.steps_per_second:.0f} "
            f"| {latencies(result.enqueue_latency_ms)} | {latencies(result.worker_latency_ms)} "
            f"| {result.worker_cpu:.0%} / {result.redis_cpu:.0%} |"
        )
    rates = [result.steps_per_second for result in results]
    if len(rates) > 1:
        lines.append(
            f"| median of {len(rates)} | | | | {statistics.median(rates):.0f} "
            f"({min(rates):.0f}-{max(rates):.0f}) | | | |"
        )
    return "\n".join(lines)


#: Where a function's own (self) time is counted, by the first fragment of its file's path
#: that matches; built-ins by their name.
PROFILE_PARTS = (
    ("waiting for Redis's replies (epoll)", ("select.epoll",)),
    ("redis-py (commands, pipelines, connections, parsing)", ("/redis/", "hiredis")),
    ("asyncio event loop", ("/asyncio/", "selectors.py", "_asyncio")),
    ("JSON", ("/json/",)),
    ("plaita domain", ("plaita/domain/",)),
    ("plaita application (engine, step)", ("plaita/application/",)),
    ("plaita adapters", ("plaita/adapters/",)),
    ("plaita entrypoints (worker loop)", ("plaita/entrypoints/",)),
    ("attrs", ("/attr/",)),
    ("this bench (poll)", ("bench/",)),
)


def profile_shares(stats: pstats.Stats) -> str:
    """The profiled run's self time per part of the stack, as a Markdown table."""
    totals: dict[str, float] = {}
    for (filename, _, name), (_, _, self_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename}:{name}"
        part = next(
            (label for label, marks in PROFILE_PARTS if any(mark in where for mark in marks)),
            "other (built-ins, stdlib)",
        )
        totals[part] = totals.get(part, 0.0) + self_time
    whole = sum(totals.values()) or 1.0
    lines = ["| part of the stack | self time s | share |", "| --- | ---: | ---: |"]
    for part, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        lines.append(f"| {part} | {seconds:.3f} | {100 * seconds / whole:.0f}% |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> tuple[str, list[RunResult], str | None]:
    version = await redis_version(args)
    results = [await one_run(args) for _ in range(args.runs)]
    report = None
    if args.profile:
        profiler = cProfile.Profile()
        results_profiled = await one_run(args, profiler)
        out = io.StringIO()
        out.write(
            f"profiled run (not in the table): {results_profiled.steps_per_second:.0f} "
            "steps/s under cProfile\n"
        )
        stats = pstats.Stats(profiler, stream=out)
        out.write(profile_shares(stats) + "\n\n")
        stats.sort_stats("cumulative").print_stats(args.profile_top)
        stats.sort_stats("tottime").print_stats(args.profile_top)
        report = out.getvalue()
    return version, results, report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--executions", type=int, default=200, help="start carriers (E)")
    parser.add_argument("--nodes", type=int, default=10, help="no-op task nodes per flow (N)")
    parser.add_argument("--concurrency", type=int, default=64, help="worker concurrency")
    parser.add_argument("--read-block-ms", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--redis-cluster", action="store_true", help="--redis-url is a Redis Cluster seed node"
    )
    parser.add_argument("--workers", type=int, default=1, help="worker processes (1 = in here)")
    parser.add_argument("--partitions", type=int, default=1, help="queue partitions (P)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per run, at most")
    parser.add_argument("--poll-ms", type=int, default=50, help="completion poll interval")
    parser.add_argument(
        "--concurrency-limit",
        type=int,
        default=None,
        help="the flow's concurrency limit (E1a), one key for the whole flow; none by default",
    )
    parser.add_argument("--profile", action="store_true", help="one more run under cProfile")
    parser.add_argument("--profile-top", type=int, default=10)
    parser.add_argument(
        "--json", action="store_true", help="print the runs as one JSON object, not a table"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.executions <= 100_000:
        parser.error("--executions must be between 1 and 100000")
    if not 1 <= args.nodes <= 1000:
        parser.error("--nodes must be between 1 and 1000")
    if not 1 <= args.concurrency <= 10_000:
        parser.error("--concurrency must be between 1 and 10000")
    if not 1 <= args.partitions <= 64:
        parser.error("--partitions must be between 1 and 64")
    if not 1 <= args.workers <= 16:
        parser.error("--workers must be between 1 and 16")
    if args.profile and args.workers > 1:
        parser.error("--profile profiles the in-process worker: use it with --workers 1")
    if not 1 <= args.runs <= 20:
        parser.error("--runs must be between 1 and 20")
    if not 0 < args.timeout <= 300:
        parser.error("--timeout must be in (0, 300]")
    if not 1 <= args.poll_ms <= 1000:
        parser.error("--poll-ms must be between 1 and 1000")
    return args


def as_json(
    results: list[RunResult], args: argparse.Namespace, version: str, load: str
) -> dict[str, Any]:
    """What ``--json`` prints: the configuration and, per run, its counts and timings
    (latency percentiles only, not the samples), for a harness such as bench/peers/."""

    def latencies(samples: list[float]) -> dict[str, float] | None:
        if not samples:
            return None
        return {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99)}

    return {
        "python": platform.python_version(),
        "redis": version,
        "load_average": load,
        "executions": args.executions,
        "nodes": args.nodes,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "partitions": args.partitions,
        "runs": [
            {
                "executions": result.executions,
                "completed": result.completed,
                "steps": result.steps,
                "wall_seconds": result.wall_seconds,
                "steps_per_second": result.steps_per_second,
                "enqueue_latency_ms": latencies(result.enqueue_latency_ms),
                "worker_latency_ms": latencies(result.worker_latency_ms),
                "worker_cpu": result.worker_cpu,
                "worker_cpu_seconds": result.worker_cpu_seconds,
                "redis_cpu": result.redis_cpu,
                "redis_cpu_seconds": result.redis_cpu_seconds,
                "problem": result.problem,
            }
            for result in results
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    # The bench's own reads (the completion poll, the final loads) are the default tenant's;
    # the worker opens each carrier's tenant scope itself (W24).
    with tenant_scope(DEFAULT_TENANT):
        version, results, profile = asyncio.run(main_async(args))
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    problems = [f"run {n}: {r.problem}" for n, r in enumerate(results, 1) if r.problem]
    if args.json:
        print(json.dumps(as_json(results, args, version, load)))
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    print(
        f"plaita worker throughput — python {platform.python_version()}, redis {version}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}, load average {load}, "
        f"{time.monotonic() - started:.1f} s"
    )
    print()
    print(table(results, args))
    for problem in problems:
        print(problem, file=sys.stderr)
    if profile is not None:
        print()
        print(profile)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
