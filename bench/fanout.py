"""Fan-out throughput: a ``map`` node over N no-op children on real ``plaita worker``
processes and a real Redis, with 1 and 2 workers (E14, P1); and what the parent's checkpoint
costs per completed child.

One run: in a fresh namespace, register ``bench_item`` (one no-op task, then end) and
``bench_map`` (a map over ``$input.items`` running ``bench_item``, ``--concurrency`` at a
time), start K ``plaita worker`` processes, wait until each logged ``worker.started``, start
one ``bench_map`` execution over N items, and wait for it to end (``plaita executions wait``).
The time is the parent's own: from its creation to its completing checkpoint
(``updated_at_ms - created_at_ms``), so neither process starts nor the poll count;
children/s = N / that time. Every child is checked completed and the parent's result checked
to be the N outputs in item order. The workers are stopped by pid and the namespace deleted.

The checkpoint bytes per child are computed, not sampled: the parent's states after each
child's end are built with the domain's own rules (``begin_map``, ``child_ended``,
``apply_step``) in a random order of completions, and each save's incremental delta
(``checkpoint_delta``, S3) is encoded as the stores write it. The figure is the mean and the
largest over the N completions, for N = 100 and N = 10,000, so growth with N would show.

    .venv/bin/python bench/fanout.py                       # 1,000 items, 1 and 2 workers
    .venv/bin/python bench/fanout.py --items 200 --runs 1

Performance is measured here, never in timed unit tests (the P requirements).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from plaita.domain.checkpoint import checkpoint_delta, encode_value
from plaita.domain.children import OnItemError, begin_map, child_ended
from plaita.domain.execution import ExecutionState, ExecutionStatus, Suspension
from plaita.domain.flow import Flow
from plaita.domain.step import StepRecord, apply_step

REPO_ROOT = Path(__file__).resolve().parents[1]
ITEM = {
    "flow_id": "bench_item",
    "start": "work",
    "nodes": [
        {
            "id": "work",
            "type": "task",
            "handler": "examples.docs_handlers:echo",
            "params": {"n": "${item}"},
            "next": "done",
        },
        {"id": "done", "type": "end", "output": "$NODE['work']['n']"},
    ],
}


def mapping(concurrency: int) -> dict[str, Any]:
    return {
        "flow_id": "bench_map",
        "start": "each",
        "nodes": [
            {
                "id": "each",
                "type": "map",
                "items": "$input.items",
                "flow_id": "bench_item",
                "concurrency": concurrency,
                "next": "done",
            },
            {"id": "done", "type": "end"},
        ],
    }


def plaita(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "plaita.entrypoints.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"plaita {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def one_run(args: argparse.Namespace, workers: int) -> dict[str, Any]:
    namespace = f"bench-fanout-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PLAITA_REDIS_URL": args.redis_url, "PLAITA_NAMESPACE": namespace}
    logs = Path(tempfile.mkdtemp(prefix="plaita-fanout-"))
    processes: list[subprocess.Popen[bytes]] = []
    client = redis.Redis.from_url(args.redis_url)
    try:
        with tempfile.TemporaryDirectory() as flows:
            for document in (ITEM, mapping(args.concurrency)):
                (Path(flows) / f"{document['flow_id']}.json").write_text(json.dumps(document))
            plaita(
                env,
                "flows",
                "register",
                *sorted(str(p) for p in Path(flows).iterdir()),
                "--handler-modules",
                "examples.docs_handlers",
            )
        for number in range(workers):
            log = (logs / f"worker-{number}.log").open("wb")
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "plaita.entrypoints.cli",
                        "worker",
                        "--handler-modules",
                        "examples.docs_handlers",
                        "--concurrency",
                        str(args.worker_concurrency),
                        "--consumer-name",
                        f"bench-{number}",
                        "--read-block-ms",
                        "50",
                    ],
                    cwd=REPO_ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + 30
        while not all(
            "worker.started" in (logs / f"worker-{n}.log").read_text() for n in range(workers)
        ):
            if time.monotonic() > deadline:
                raise SystemExit(f"the workers did not start; logs in {logs}")
            time.sleep(0.1)
        items = list(range(args.items))
        started = json.loads(
            plaita(
                env,
                "executions",
                "start",
                "bench_map",
                "--input",
                json.dumps({"items": items}),
                "--json",
            )
        )
        parent = started["execution_id"]
        plaita(
            env,
            "executions",
            "wait",
            parent,
            "--timeout",
            str(args.timeout),
            timeout=args.timeout + 30,
        )
        shown = json.loads(plaita(env, "executions", "show", parent, "--json"))
        if shown["status"] != "completed" or shown["result"] != items:
            raise SystemExit(f"the map did not give every item in order: {shown['status']}")
        seconds = (shown["updated_at_ms"] - shown["created_at_ms"]) / 1000
        return {
            "workers": workers,
            "items": args.items,
            "seconds": seconds,
            "children_per_s": args.items / seconds,
            "steps": shown["steps"],
        }
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for key in client.scan_iter(match=f"{namespace}*", count=1000):
            client.delete(key)
        client.close()


def checkpoint_bytes(items: int, concurrency: int, seed: int = 7) -> tuple[float, int]:
    """Mean and largest bytes of the parent's incremental saves, one per child's end."""
    flow = Flow.from_document(mapping(concurrency))
    state = ExecutionState.new(
        execution_id="p",
        flow_id="bench_map",
        flow_version="1",
        fingerprint=flow.fingerprint,
        start_node_id="each",
        input={"items": list(range(items))},
        now_ms=0,
    )
    step = begin_map(items, concurrency=concurrency, on_item_error=OnItemError.FAIL)
    progress, running = step.progress, list(step.start)
    shuffle = random.Random(seed)
    sizes: list[int] = []
    now = 1
    previous = None
    while not progress.finished:
        wait = Suspension("each", "timer", 60_000, map=progress)
        record = StepRecord(
            node_id="each",
            variables={},
            node_results={},
            last_node_id=None,
            last_branch=None,
            suspension=wait,
        )
        current = apply_step(state, record, flow=flow, started_ms=now, now_ms=now + 1)
        if previous is not None:
            delta = checkpoint_delta(previous, current)
            sizes.append(
                sum(len(k) + len(encode_value(v)) for k, v in delta.header.items())
                + sum(len(k) + len(encode_value(v)) for k, v in delta.nodes.items())
            )
        previous, state, now = current, current, now + 2
        index = running.pop(shuffle.randrange(len(running)))
        step = child_ended(progress, index=index, ok=True)
        progress = step.progress
        running += list(step.start)
    assert state.status is ExecutionStatus.SUSPENDED
    return statistics.fmean(sizes), max(sizes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50, help="the map's concurrency")
    parser.add_argument("--worker-concurrency", type=int, default=16)
    parser.add_argument("--workers", default="1,2", help="worker counts to run, e.g. 1,2")
    parser.add_argument("--runs", type=int, default=3, help="runs per worker count")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    print(
        f"machine: {platform.processor() or platform.machine()}, nproc={os.cpu_count()}, "
        f"python {platform.python_version()}, load {os.getloadavg()[0]:.2f}"
    )
    results = [one_run(args, int(k)) for _ in range(args.runs) for k in args.workers.split(",")]
    print("\n| workers | items | runs | children/s (median) | range | parent steps |")
    print("| ---: | ---: | ---: | ---: | --- | ---: |")
    for k in sorted({r["workers"] for r in results}):
        rates = [r["children_per_s"] for r in results if r["workers"] == k]
        steps = [r["steps"] for r in results if r["workers"] == k]
        print(
            f"| {k} | {args.items} | {len(rates)} | {statistics.median(rates):.0f} | "
            f"{min(rates):.0f} to {max(rates):.0f} | {max(steps)} |"
        )
    print("\n| items | concurrency | bytes per child's end (mean) | largest |")
    print("| ---: | ---: | ---: | ---: |")
    for items in (100, 10_000):
        mean, largest = checkpoint_bytes(items, args.concurrency)
        print(f"| {items} | {args.concurrency} | {mean:.0f} | {largest} |")


if __name__ == "__main__":
    main()
