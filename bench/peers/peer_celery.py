"""The Celery peer: a durable chain of N no-op tasks per execution on a Redis broker.

Imported by the ``celery`` worker CLI (the app and the task), and run as a script by
``run.py`` in the Celery virtualenv: start one worker of the prefork pool with 2 children
(``celery -A peer_celery worker --pool prefork --concurrency 2``), enqueue E first tasks,
each task enqueues the next of its execution, the N-th appends its finish time to a Redis
list; print the wall time and the CPU of the worker and its pool as one ``PEER-RESULT``
JSON line.

Configured for durability rather than Celery's defaults: ``task_acks_late`` (a task is
acknowledged after it ran, so a lost worker's tasks come back; the default acknowledges
before running), no result backend (``task_ignore_result``), the default prefetch of 4.
"""

from __future__ import annotations

import os
import sys
import time
from importlib import metadata
from pathlib import Path

import redis
from celery import Celery

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import common  # noqa: E402

QUEUE = "plaita_peer_bench"
REDIS_URL = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/3")

app = Celery("peer_celery", broker=REDIS_URL)
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
client = redis.Redis.from_url(REDIS_URL)


@app.task(name="plaita_peer_bench.step")
def step(run: str, index: int, nodes: int) -> None:
    """One no-op step: enqueue the next step of this execution, or record its finish."""
    if index + 1 < nodes:
        step.apply_async((run, index + 1, nodes))
    else:
        client.rpush(common.done_key(run), time.time_ns())


def done_times(run: str) -> list[int]:
    return common.done_times_of(client, run)


def main() -> int:
    arguments = common.chain_arguments(__doc__ or "", pool="concurrency", pool_default=2)
    return common.run_broker_peer(
        name="celery",
        command=[
            str(Path(sys.executable).with_name("celery")),
            "-A",
            "peer_celery",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            str(arguments.concurrency),
            "--queues",
            QUEUE,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "WARNING",
        ],
        env={**os.environ, "PEER_REDIS_URL": REDIS_URL, "PYTHONPATH": str(HERE)},
        send_first=lambda run, nodes: step.apply_async((run, 0, nodes)),
        done_times=done_times,
        cleanup=lambda: common.unlink_peer_keys(client),
        arguments=arguments,
        version=metadata.version("celery"),
        topology=f"1 worker, prefork pool of {arguments.concurrency}",
    )


if __name__ == "__main__":
    sys.exit(main())
