"""The console's /metrics (C5): the deployment as the stores show it, read at each scrape.

Each worker exports its own counters (steps, failures, retries, lease conflicts, resume
latency) on ``--metrics-port``; the console adds what no single worker sees: the queue, the
dead letters, the timers waiting and which workers are alive. Its registry is its own, never
the process-global one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest

from plaita.application.ports import WorkerInstance

__all__ = ["CONTENT_TYPE_LATEST", "ClusterSnapshot", "ConsoleMetrics"]

#: Worker statuses always exported (0 when none), so an alert on `running == 0` never sees
#: an absent series.
WORKER_STATUSES = ("starting", "running", "draining", "stopping", "stopped", "closed")


@attrs.frozen
class ClusterSnapshot:
    stream_length: int
    pending: int
    dlq_length: int
    delayed: int
    workers: Sequence[WorkerInstance]
    now_ms: int
    #: How long the oldest carrier no worker has read yet has waited; 0 when none waits.
    lag_ms: int = 0


class ConsoleMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.stream_length = Gauge(
            "plaita_stream_length", "Entries in the task stream.", registry=r
        )
        self.stream_pending = Gauge(
            "plaita_stream_pending", "Carriers delivered and not yet acked.", registry=r
        )
        self.dlq_length = Gauge(
            "plaita_dlq_length", "Entries in the dead-letter queue.", registry=r
        )
        self.delayed = Gauge(
            "plaita_delayed_carriers",
            "Carriers waiting in the delay queue (retries with backoff, timers).",
            registry=r,
        )
        self.lag = Gauge(
            "plaita_queue_lag_seconds",
            "How long the oldest carrier no worker has read yet has waited (0: none waits).",
            registry=r,
        )
        self.workers = Gauge(
            "plaita_workers", "Registered workers, by status.", ["status"], registry=r
        )
        self.heartbeat_age = Gauge(
            "plaita_worker_heartbeat_age_seconds",
            "Seconds since each registered worker last wrote its record.",
            ["instance_id"],
            registry=r,
        )
        self.requests = Counter(
            "plaita_console_requests",
            "Console API requests answered, by route and status.",
            ["method", "route", "status"],
            registry=r,
        )

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self.stream_length.set(snapshot.stream_length)
        self.stream_pending.set(snapshot.pending)
        self.dlq_length.set(snapshot.dlq_length)
        self.delayed.set(snapshot.delayed)
        self.lag.set(snapshot.lag_ms / 1000)
        counts = dict.fromkeys(WORKER_STATUSES, 0)
        for worker in snapshot.workers:
            counts[worker.status] = counts.get(worker.status, 0) + 1
        for status, count in counts.items():
            self.workers.labels(status).set(count)
        # Workers that went away must not linger as stale series.
        self.heartbeat_age.clear()
        for worker in snapshot.workers:
            age = max(0, snapshot.now_ms - worker.heartbeat_ms) / 1000
            self.heartbeat_age.labels(worker.instance_id).set(age)

    def answered(self, method: str, route: str, status: int) -> None:
        self.requests.labels(method, route, str(status)).inc()

    async def render(self, snapshot: Callable[[], Awaitable[ClusterSnapshot]]) -> bytes:
        self.observe(await snapshot())
        return generate_latest(self.registry)
