"""Event publish → resumed node started, across real processes on loopback Redis (P4).

One run, in a fresh namespace: start ONE ``plaita worker`` and ONE ``plaita event-filter``
process (``--log-level WARNING``, so per-node log lines do not slow them), register a flow
``wait`` (event node) → ``resumed`` (task) → ``done``, start W + E executions and wait until
every one is suspended on its event node. Then publish one event per execution from this
process — through the container's ``PublishEvent``, the very use case ``plaita events
publish`` runs (inbox, record, type and time indexes, notification) — open loop at
``--rate`` events per second; the first W (warm-up) are left out of the figures.

What is measured, per execution:

- **publish → resumed node started** = the resumed node's start minus the event's
  ``timestamp_ms``. The start is taken by the ``resumed`` node's own handler
  (``mark_started``, async so no thread hop): its first statement reads ``time.time_ns()``
  and returns it, so the figure lands in the execution's checkpoint
  (``node_results["resumed"]["started_ns"]``) and no log parsing or extra write is needed.
  It covers the whole path: the publish's writes, the filter's read of the notification,
  its subscription lookup and resume enqueue, the worker's read, lease, the event node's
  completion and checkpoint, and the task node's start. ``timestamp_ms`` is taken by
  ``PublishEvent`` before its first write, in whole milliseconds (truncated), so this
  figure can be up to 1 ms higher than the true interval.
- **precise** = the same start minus ``time.time_ns()`` read just before the publish call:
  nanosecond resolution, and the reference the figure above approximates.
- **where the time goes**: the resume carrier's stream entry id is the Redis server's clock
  when the event filter's XADD landed, so ``entry ms - timestamp_ms`` is the publish +
  filter leg and ``start - entry ms`` the worker leg (both to the millisecond).

Every process runs on this host and reads the same wall clock (``CLOCK_REALTIME``), so the
differences need no clock-offset correction. Open loop means events are published on
schedule whether or not earlier ones were handled: below what the worker (P1, ~2,500
steps/s; a resume is 3 steps) and the event filter sustain, this is the latency of a quiet
system; above it, it is queueing, and the two legs show on which side. ``--rate 0``
publishes everything at once and measures a burst.

    .venv/bin/python bench/event_latency.py                      # 1000 events at 100/s
    .venv/bin/python bench/event_latency.py --rate 0             # a burst
    .venv/bin/python bench/event_latency.py --append-results     # + bench/RESULTS.md
    .venv/bin/python bench/event_latency.py --json               # one JSON object (bench/peers)

The worker imports this file as ``bench.event_latency`` (``--handler-modules``) from the
repository root. A run stops itself after ``--timeout`` seconds whatever happened; both
processes are stopped by pid and the namespace is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import attrs
import redis.asyncio as redis

REPO_ROOT = Path(__file__).resolve().parents[1]
HANDLER_MODULE = "bench.event_latency"
FLOW_ID = "bench_event_latency"
EVENT_TYPE = "bench_event_latency_go"
RESULTS_FILE = REPO_ROOT / "bench" / "RESULTS.md"
RESULTS_HEADING = "## Event latency (V, issue 6)"


async def mark_started(params: Any, ctx: Any) -> dict[str, int]:
    """The ``resumed`` node's handler: when it started, in ns of the wall clock."""
    return {"started_ns": time.time_ns()}


def flow_document() -> dict[str, Any]:
    return {
        "flow_id": FLOW_ID,
        "version": "1",
        "start": "wait",
        "nodes": [
            {"id": "wait", "type": "event", "event_type": EVENT_TYPE, "next": "resumed"},
            {
                "id": "resumed",
                "type": "task",
                "handler": f"{HANDLER_MODULE}:mark_started",
                "next": "done",
            },
            {"id": "done", "type": "end"},
        ],
    }


@attrs.frozen
class Sample:
    event_timestamp_ms: int
    publish_ns: int
    started_ns: int
    #: When the resume carrier was added to the task stream (its entry id), if found.
    carrier_ms: int | None = None

    @property
    def filter_leg_ms(self) -> float | None:
        return None if self.carrier_ms is None else self.carrier_ms - self.event_timestamp_ms

    @property
    def worker_leg_ms(self) -> float | None:
        return None if self.carrier_ms is None else self.started_ns / 1e6 - self.carrier_ms

    @property
    def latency_ms(self) -> float:
        return self.started_ns / 1e6 - self.event_timestamp_ms

    @property
    def precise_ms(self) -> float:
        return (self.started_ns - self.publish_ns) / 1e6


@attrs.frozen
class RunResult:
    samples: list[Sample]
    expected: int
    publish_seconds: float
    problem: str | None = None


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def plaita_command() -> list[str]:
    script = Path(sys.executable).with_name("plaita")
    return [str(script)] if script.exists() else [sys.executable, "-m", "plaita.entrypoints.cli"]


class Processes:
    """The worker and the event filter; always stopped by pid, logs kept in a temp dir."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self._env = env
        self._log_dir = log_dir
        self.running: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def spawn(self, name: str, *args: str) -> None:
        log = self._log_dir / f"{name}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*plaita_command(), "--log-level", "WARNING", *args],
                cwd=REPO_ROOT,
                env=self._env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.running.append((name, process, log))

    def check_alive(self) -> None:
        for name, process, log in self.running:
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")

    def stop(self) -> None:
        for _, process, _ in self.running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process, _ in self.running:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


async def statuses(client: redis.Redis, namespace: str, ids: list[str]) -> list[str | None]:
    async with client.pipeline(transaction=False) as pipe:
        for execution_id in ids:
            pipe.hget(f"{namespace}:x:{{{execution_id}}}:state", "status")
        raw = await pipe.execute()
    return [None if value is None else json.loads(value) for value in raw]


async def wait_for(
    client: redis.Redis,
    namespace: str,
    ids: list[str],
    wanted: str,
    *,
    deadline: float,
    processes: Processes,
) -> int:
    """Poll until every execution has status ``wanted`` or ``deadline``; how many have it."""
    outstanding = list(ids)
    while outstanding and time.monotonic() < deadline:
        processes.check_alive()
        found = await statuses(client, namespace, outstanding)
        outstanding = [i for i, status in zip(outstanding, found, strict=True) if status != wanted]
        if outstanding:
            await asyncio.sleep(0.05)
    return len(ids) - len(outstanding)


async def first_event_carriers(client: redis.Redis, stream: str) -> dict[str, int]:
    """Execution id -> when its first event resume carrier entered the task stream (ms)."""
    from plaita.application.codec import decode_envelope
    from plaita.domain.envelope import ResumeType

    found: dict[str, int] = {}
    start = "-"
    while True:
        entries = await client.xrange(stream, min=start, count=1000)
        for entry_id, fields in entries:
            envelope = decode_envelope(fields)
            if envelope.resume_type is ResumeType.EVENT:
                found.setdefault(envelope.execution_id, int(entry_id.split("-")[0]))
        if len(entries) < 1000:
            return found
        start = "(" + entries[-1][0]


async def delete_namespace(client: redis.Redis, namespace: str) -> None:
    batch: list[str] = []
    async for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            await client.unlink(*batch)
            batch.clear()
    if batch:
        await client.unlink(*batch)


async def one_run(args: argparse.Namespace, log_dir: Path) -> RunResult:
    from plaita.application.tenancy import tenant_scope
    from plaita.domain.flow import Flow
    from plaita.domain.flow_owners import SHARED
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.settings import Settings

    namespace = f"plaita-bench-evlat-{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "PLAITA_REDIS_URL": args.redis_url, "PLAITA_NAMESPACE": namespace}
    processes = Processes(env, log_dir)
    settings = Settings(backend="redis", redis_url=args.redis_url, namespace=namespace)
    container = build_container(settings)
    observer = redis.Redis.from_url(args.redis_url, decode_responses=True)
    deadline = time.monotonic() + args.timeout
    try:
        await observer.ping()
        await container.flow_repository().put_if_absent(
            Flow.from_document(flow_document()), owner=SHARED
        )
        processes.spawn(
            "worker",
            "worker",
            "--handler-modules",
            HANDLER_MODULE,
            "--concurrency",
            str(args.concurrency),
            "--consumer-name",
            f"{namespace}-worker",
        )
        processes.spawn("event-filter", "event-filter", "--consumer-name", f"{namespace}-filter")

        total = args.warmup + args.events
        start = container.start_execution()
        with tenant_scope("default"):
            ids = [(await start(FLOW_ID)).execution_id for _ in range(total)]
        waiting = await wait_for(
            observer, namespace, ids, "suspended", deadline=deadline, processes=processes
        )
        if waiting < total:
            return RunResult([], args.events, 0.0, f"only {waiting}/{total} suspended in time")

        publish = container.publish_event()
        published: dict[str, tuple[int, int]] = {}
        began = time.monotonic()
        for index, execution_id in enumerate(ids):
            if args.rate > 0:
                await asyncio.sleep(max(0.0, began + index / args.rate - time.monotonic()))
            publish_ns = time.time_ns()
            event = await publish(EVENT_TYPE, data={"n": index}, correlation_id=execution_id)
            published[execution_id] = (event.timestamp_ms, publish_ns)
        publish_seconds = time.monotonic() - began

        done = await wait_for(
            observer, namespace, ids, "completed", deadline=deadline, processes=processes
        )
        carriers = await first_event_carriers(
            observer, container.redis_keys().queue_stream("default")
        )
        executions = container.executions()
        samples = []
        with tenant_scope("default"):
            for execution_id in ids[args.warmup :]:
                state = await executions.load(execution_id)
                if state is None or "resumed" not in state.node_results:
                    continue
                timestamp_ms, publish_ns = published[execution_id]
                started_ns = int(state.node_results["resumed"]["started_ns"])
                carrier_ms = carriers.get(execution_id)
                samples.append(Sample(timestamp_ms, publish_ns, started_ns, carrier_ms))
        problem = None
        if done < total:
            problem = f"only {done}/{total} executions completed within {args.timeout} s"
        return RunResult(samples, args.events, publish_seconds, problem)
    finally:
        processes.stop()
        with contextlib.suppress(Exception):
            await delete_namespace(observer, namespace)
        await observer.aclose()
        with contextlib.suppress(Exception):
            await container.redis_client().aclose()


def machine(redis_info: dict[str, Any]) -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"`nproc` = {nproc} ({model}), CPython {platform.python_version()}, "
        f"Redis {redis_info.get('redis_version', '?')} on loopback; load average {load} "
        "at the end of the run"
    )


def report(result: RunResult, args: argparse.Namespace, described: str) -> str:
    pace = "all at once (burst)" if args.rate == 0 else f"open loop at {args.rate:g} events/s"
    lines = [
        f"{len(result.samples)}/{result.expected} measured executions (after {args.warmup} "
        f"warm-up), one worker (concurrency {args.concurrency}) and one event filter, "
        f"events published {pace} in {result.publish_seconds:.1f} s. Machine: {described}.",
        "",
        "| measure | p50 ms | p95 ms | p99 ms | max ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, values in (
        (
            "event `timestamp_ms` → resumed node started",
            [s.latency_ms for s in result.samples],
        ),
        ("publish call (ns clock) → resumed node started", [s.precise_ms for s in result.samples]),
        (
            "of which publish + event filter (→ carrier in the task stream)",
            [s.filter_leg_ms for s in result.samples if s.filter_leg_ms is not None],
        ),
        (
            "of which worker (carrier → resumed node started)",
            [s.worker_leg_ms for s in result.samples if s.worker_leg_ms is not None],
        ),
    ):
        if values:
            lines.append(
                f"| {name} | {percentile(values, 0.5):.2f} | {percentile(values, 0.95):.2f} "
                f"| {percentile(values, 0.99):.2f} | {max(values):.2f} |"
            )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> tuple[RunResult, str]:
    client = redis.Redis.from_url(args.redis_url, decode_responses=True)
    try:
        info = await client.info("server")
    finally:
        await client.aclose()
    with tempfile.TemporaryDirectory(prefix="plaita-bench-evlat-") as log_dir:
        result = await one_run(args, Path(log_dir))
    return result, machine(info)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--events", type=int, default=1000, help="measured executions")
    parser.add_argument("--warmup", type=int, default=20, help="executions left out first")
    parser.add_argument(
        "--rate", type=float, default=100.0, help="events per second (0: all at once)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="worker concurrency")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds, at most")
    parser.add_argument(
        "--append-results", action="store_true", help=f"append the figures to {RESULTS_FILE}"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the figures as one JSON object, not a table"
    )
    args = parser.parse_args(argv)
    if args.json and args.append_results:
        parser.error("--json and --append-results do not go together")
    if not 1 <= args.events <= 100_000:
        parser.error("--events must be between 1 and 100000")
    if not 0 <= args.warmup <= 10_000:
        parser.error("--warmup must be between 0 and 10000")
    if not 0 <= args.rate <= 100_000:
        parser.error("--rate must be between 0 (all at once) and 100000 events/s")
    if not 1 <= args.concurrency <= 10_000:
        parser.error("--concurrency must be between 1 and 10000")
    if not 0 < args.timeout <= 900:
        parser.error("--timeout must be in (0, 900] seconds")
    return args


def as_json(result: RunResult, args: argparse.Namespace, described: str) -> dict[str, Any]:
    """What ``--json`` prints: the run's configuration and the percentiles of each measure
    of the table (publish call → resumed node started is ``precise_ms``)."""

    def summary(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        return {
            "p50": percentile(values, 0.5),
            "p95": percentile(values, 0.95),
            "p99": percentile(values, 0.99),
            "max": max(values),
        }

    return {
        "machine": described,
        "events": args.events,
        "warmup": args.warmup,
        "rate": args.rate,
        "concurrency": args.concurrency,
        "measured": len(result.samples),
        "publish_seconds": result.publish_seconds,
        "latency_ms": summary([s.latency_ms for s in result.samples]),
        "precise_ms": summary([s.precise_ms for s in result.samples]),
        "filter_leg_ms": summary(
            [s.filter_leg_ms for s in result.samples if s.filter_leg_ms is not None]
        ),
        "worker_leg_ms": summary(
            [s.worker_leg_ms for s in result.samples if s.worker_leg_ms is not None]
        ),
        "problem": result.problem,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result, described = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(as_json(result, args, described)))
        if result.problem:
            print(f"problem: {result.problem}", file=sys.stderr)
        return 1 if result.problem else 0
    text = report(result, args, described)
    print(text)
    if result.problem:
        print(f"problem: {result.problem}", file=sys.stderr)
        return 1
    if args.append_results:
        existing = RESULTS_FILE.read_text(encoding="utf-8") if RESULTS_FILE.exists() else ""
        heading = "" if RESULTS_HEADING in existing else f"\n{RESULTS_HEADING}\n"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime())
        with RESULTS_FILE.open("a", encoding="utf-8") as results:
            results.write(f"{heading}\n### Run of {when}\n\n{text}\n")
        print(f"appended to {RESULTS_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
