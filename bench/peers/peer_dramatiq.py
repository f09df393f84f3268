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

import os
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


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def step(run: str, index: int, nodes: int) -> None:
    """One no-op step: enqueue the next step of this execution, or record its finish."""
    if index + 1 < nodes:
        step.send(run, index + 1, nodes)
    else:
        client.rpush(common.done_key(run), time.time_ns())


def done_times(run: str) -> list[int]:
    return common.done_times_of(client, run)


def main() -> int:
    arguments = common.chain_arguments(__doc__ or "", pool="threads", pool_default=8)
    return common.run_broker_peer(
        name="dramatiq",
        command=[
            str(Path(sys.executable).with_name("dramatiq")),
            "peer_dramatiq",
            "--processes",
            "1",
            "--threads",
            str(arguments.threads),
            "--queues",
            QUEUE,
            "--path",
            str(HERE),
        ],
        env={**os.environ, "PEER_REDIS_URL": REDIS_URL},
        send_first=lambda run, nodes: step.send(run, 0, nodes),
        done_times=done_times,
        cleanup=lambda: common.unlink_peer_keys(client),
        arguments=arguments,
        version=metadata.version("dramatiq"),
        topology=f"1 process x {arguments.threads} threads",
    )


if __name__ == "__main__":
    sys.exit(main())
