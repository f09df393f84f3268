"""The Dramatiq peer: a durable chain of N no-op messages per execution on a Redis broker.

Imported by the ``dramatiq`` worker CLI (the broker and the actor), and run as a script by
``run.py`` in the Dramatiq virtualenv: start one worker process of 8 threads
(``dramatiq peer_dramatiq --processes 1 --threads 8``), enqueue E first messages, each
message enqueues the next of its execution, the N-th appends its finish time to a Redis
list; print the wall time and the worker's CPU as one ``PEER-RESULT`` JSON line.

Dramatiq's Redis broker acknowledges a message after the actor returns (a message a dead
worker held is requeued), retries are off (``max_retries=0``), and there is no result
backend: the chain's state is the next message itself.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import common  # noqa: E402

QUEUE = "plaita_peer_bench"
REDIS_URL = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/2")

broker = RedisBroker(url=REDIS_URL)
dramatiq.set_broker(broker)
client = redis.Redis.from_url(REDIS_URL)


def done_key(run: str) -> str:
    return f"plaita_peer_bench:{run}:done"


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def step(run: str, index: int, nodes: int) -> None:
    """One no-op step: enqueue the next step of this execution, or record its finish."""
    if index + 1 < nodes:
        step.send(run, index + 1, nodes)
    else:
        client.rpush(done_key(run), time.time_ns())


def done_times(run: str) -> list[int]:
    return [int(value) for value in client.lrange(done_key(run), 0, -1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    common.exit_on_sigterm()
    log = common.worker_log("dramatiq-worker")
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("dramatiq")),
                "peer_dramatiq",
                "--processes",
                "1",
                "--threads",
                str(args.threads),
                "--queues",
                QUEUE,
                "--path",
                str(HERE),
            ],
            cwd=HERE,
            env={**os.environ, "PEER_REDIS_URL": REDIS_URL},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        result = common.measure_chains(
            worker,
            send_first=lambda run, nodes: step.send(run, 0, nodes),
            done_times=done_times,
            executions=args.executions,
            nodes=args.nodes,
            timeout=args.timeout,
        )
    finally:
        common.stop_tree(worker)
        for key in client.scan_iter(match="plaita_peer_bench:*"):
            client.unlink(key)
    result["version"] = metadata.version("dramatiq")
    result["topology"] = f"1 process x {args.threads} threads"
    if result.get("problem"):
        result["log_tail"] = log.read_text(errors="replace")[-2000:]
    common.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
