"""The console's metrics on prometheus-client (C5): the deployment as the stores show it.

Each worker exports its own counters (steps, failures, retries, lease conflicts, resume
latency) on ``--metrics-port``; the console adds what no single worker sees: the queue, the
dead letters, the timers waiting and which workers are alive. Its registry is its own, never
the process-global one.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest

from plaita.adapters.prometheus.queue_gauges import QueueGauges
from plaita.application.ports import ClusterSnapshot
from plaita.domain.worker_state import WorkerStatus


class PrometheusConsoleMetrics:
    """ConsoleMetrics in a registry of its own, rendered at each scrape of ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue = QueueGauges(r)
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
        self.queue.set(
            length=snapshot.stream_length,
            pending=snapshot.pending,
            dead_letters=snapshot.dlq_length,
        )
        self.delayed.set(snapshot.delayed)
        self.lag.set(snapshot.lag_ms / 1000)
        # Every status, 0 when none has it: an alert on `running == 0` never sees no series.
        counts = dict.fromkeys(map(str, WorkerStatus), 0)
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

    def render(self) -> bytes:
        return generate_latest(self.registry)
