"""Redis memory per plaita execution, suspended on an event and completed (P5).

One run, in a fresh namespace on the Redis at ``--redis-url`` (the harness's own server:
``used_memory`` is the whole server's, so nothing else may write to it meanwhile). It
starts one ``plaita worker`` and one ``plaita event-filter`` (as ``bench/event_latency.py``
does, with its flow: ``wait`` (event node) → ``resumed`` (task) → ``done``), then:

1. warm-up: W executions started, suspended, their events published, completed — the
   namespace's streams, groups and indexes exist before the baseline;
2. baseline: ``INFO memory`` ``used_memory`` (and ``DBSIZE``);
3. K executions started (params ``{"data": "x" * payload}``) and suspended on their event
   node: (used_memory - baseline) / K = bytes per suspended execution, less the params'
   JSON size = bytes beyond the payload;
4. one event per execution published and every execution completed: the same figure per
   completed execution (state, event record and indexes, stream entries kept).

Where the bytes go: ``MEMORY USAGE`` (exact, ``SAMPLES 0``) of every key of the namespace
before and after step 3, summed per key pattern (execution ids and other long ids replaced
by ``*``) and divided by K. Each sample is taken after 1.5 s of quiet (the AOF's everysec
flush and client buffers settle) as the median of 3 reads. Prints one ``PEER-RESULT`` JSON
line. Processes are stopped by pid and the namespace deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as redis

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import common  # noqa: E402


async def memory_sample(client: redis.Redis) -> dict[str, int]:
    """``used_memory``, ``used_memory_dataset`` and ``DBSIZE`` after 1.5 s of quiet."""
    await asyncio.sleep(1.5)
    reads = []
    for _ in range(3):
        info = await client.info("memory")
        reads.append((int(info["used_memory"]), int(info["used_memory_dataset"])))
        await asyncio.sleep(0.1)
    return {
        "used_memory": int(statistics.median(used for used, _ in reads)),
        "used_memory_dataset": int(statistics.median(dataset for _, dataset in reads)),
        "keys": int(await client.dbsize()),
    }


#: A segment of a key that names one thing among many: an id in braces (a hash tag) or a
#: long run of id characters.
_ID_PART = re.compile(r"\{[^}]*\}|[0-9A-Za-z_-]{16,}")


def key_pattern(key: str, namespace: str) -> str:
    """``key`` without its namespace, every id-like segment replaced by ``*``."""
    rest = key.removeprefix(namespace + ":")
    return ":".join(_ID_PART.sub("*", part) for part in rest.split(":"))


async def breakdown(client: redis.Redis, namespace: str) -> dict[str, list[int]]:
    """Per key pattern of the namespace: [number of keys, bytes by ``MEMORY USAGE``]."""
    keys = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
    found: dict[str, list[int]] = {}
    for start in range(0, len(keys), 500):
        batch = keys[start : start + 500]
        async with client.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.memory_usage(key, samples=0)
            sizes = await pipe.execute()
        for key, size in zip(batch, sizes, strict=True):
            entry = found.setdefault(key_pattern(key, namespace), [0, 0])
            entry[0] += 1
            entry[1] += int(size or 0)
    return found


def breakdown_delta(
    before: dict[str, list[int]], after: dict[str, list[int]], count: int
) -> list[dict[str, Any]]:
    """Per pattern, keys and bytes added per execution; the largest first."""
    rows = []
    for pattern in after.keys() | before.keys():
        keys_then, bytes_then = before.get(pattern, [0, 0])
        keys_now, bytes_now = after.get(pattern, [0, 0])
        if bytes_now != bytes_then or keys_now != keys_then:
            rows.append(
                {
                    "pattern": pattern,
                    "keys": (keys_now - keys_then) / count,
                    "bytes": (bytes_now - bytes_then) / count,
                }
            )
    return sorted(rows, key=lambda row: -row["bytes"])


def per_execution(before: dict[str, int], after: dict[str, int], count: int) -> dict[str, float]:
    return {name: (after[name] - before[name]) / count for name in before}


async def measure(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    from bench.event_latency import (
        EVENT_TYPE,
        FLOW_ID,
        HANDLER_MODULE,
        Processes,
        delete_namespace,
        flow_document,
        wait_for,
    )
    from plaita.application.tenancy import tenant_scope
    from plaita.domain.flow import Flow
    from plaita.domain.flow_owners import SHARED
    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.settings import Settings

    namespace = f"plaita-bench-mem-{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "PLAITA_REDIS_URL": args.redis_url, "PLAITA_NAMESPACE": namespace}
    processes = Processes(env, log_dir)
    container = build_container(
        Settings(backend="redis", redis_url=args.redis_url, namespace=namespace)
    )
    observer = redis.Redis.from_url(args.redis_url, decode_responses=True)
    deadline = time.monotonic() + args.timeout
    params = {"data": "x" * args.payload}
    try:
        await container.flow_repository().put_if_absent(
            Flow.from_document(flow_document()), owner=SHARED
        )
        processes.spawn(
            "worker",
            "worker",
            "--handler-modules",
            HANDLER_MODULE,
            "--consumer-name",
            f"{namespace}-worker",
        )
        processes.spawn("event-filter", "event-filter", "--consumer-name", f"{namespace}-filter")
        start = container.start_execution()
        publish = container.publish_event()

        async def suspend(count: int) -> list[str]:
            with tenant_scope("default"):
                ids = [(await start(FLOW_ID, params=params)).execution_id for _ in range(count)]
            found = await wait_for(
                observer, namespace, ids, "suspended", deadline=deadline, processes=processes
            )
            if found < count:
                raise RuntimeError(f"only {found}/{count} executions suspended in time")
            return ids

        async def complete(ids: list[str]) -> None:
            for execution_id in ids:
                await publish(EVENT_TYPE, data={}, correlation_id=execution_id)
            found = await wait_for(
                observer, namespace, ids, "completed", deadline=deadline, processes=processes
            )
            if found < len(ids):
                raise RuntimeError(f"only {found}/{len(ids)} executions completed in time")

        await complete(await suspend(args.warmup))
        baseline = await memory_sample(observer)
        keys_before = await breakdown(observer, namespace)
        ids = await suspend(args.executions)
        suspended = await memory_sample(observer)
        keys_suspended = await breakdown(observer, namespace)
        await complete(ids)
        completed = await memory_sample(observer)
        payload = len(json.dumps(params).encode())
        per_suspended = per_execution(baseline, suspended, args.executions)
        return {
            "executions": args.executions,
            "payload_bytes": payload,
            "baseline": baseline,
            "suspended": per_suspended,
            "suspended_beyond_payload": per_suspended["used_memory"] - payload,
            "suspended_keys": breakdown_delta(keys_before, keys_suspended, args.executions),
            "completed": per_execution(baseline, completed, args.executions),
            "problem": None,
        }
    except RuntimeError as exc:
        return {"problem": str(exc)}
    finally:
        processes.stop()
        with contextlib.suppress(Exception):
            await delete_namespace(observer, namespace)
        await observer.aclose()
        with contextlib.suppress(Exception):
            await container.redis_client().aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--executions", type=int, default=1000, help="K")
    parser.add_argument("--warmup", type=int, default=20, help="W")
    parser.add_argument("--payload", type=int, default=0, help="characters in the params")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    common.exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="plaita-bench-mem-") as log_dir:
        result = asyncio.run(measure(args, Path(log_dir)))
    common.emit(result)
    return 1 if result.get("problem") else 0


if __name__ == "__main__":
    sys.exit(main())
