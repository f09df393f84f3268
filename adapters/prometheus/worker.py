"""The worker's metrics on prometheus-client (C5), in a registry of their own.

Each object owns its ``CollectorRegistry`` (never the process-global one), so a process, or
a test, may hold several. Which series a dispatch adds to is the domain's tally.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from plaita.adapters.prometheus.queue_gauges import QueueGauges
from plaita.domain.dispatch_tally import tally_dispatch

#: Event publish → resumed dispatch started, in seconds (P4 targets 3 ms p50, 15 ms p99).
RESUME_LATENCY_BUCKETS = (0.001, 0.003, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class PrometheusWorkerMetrics:
    """WorkerMetrics in ``registry``; ``PrometheusExporter`` serves it."""

    enabled = True

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.queue = QueueGauges(r)
        self.steps = Counter(
            "plaita_steps", "Dispatches settled, by outcome.", ["outcome"], registry=r
        )
        self.failures = Counter(
            "plaita_failures",
            "Dispatches that failed the execution, were dead-lettered or crashed.",
            ["outcome"],
            registry=r,
        )
        self.retries = Counter(
            "plaita_retries", "Node retries scheduled through the delay queue.", registry=r
        )
        self.lease_conflicts = Counter(
            "plaita_lease_conflicts",
            "Carriers that met another holder's lease, by what was done with them.",
            ["disposition"],
            registry=r,
        )
        self.affinity = Counter(
            "plaita_affinity",
            "Carriers naming another worker instance: passed on to it (handed_over) or their "
            "target dropped (target_stripped).",
            ["action"],
            registry=r,
        )
        self.dead_letters = Counter(
            "plaita_dead_letters",
            "Carriers dead-lettered, by guard reason.",
            ["reason"],
            registry=r,
        )
        self.dlq_trimmed_entries = Counter(
            "plaita_dlq_trimmed",
            "Dead letters dropped unreplayed by the DLQ length cap (oldest first).",
            registry=r,
        )
        self.guard_kept_pending = Counter(
            "plaita_dlq_guard_kept",
            "Carriers the dead-letter guard kept pending, by reason.",
            ["reason"],
            registry=r,
        )
        self.flow_control_waits = Counter(
            "plaita_flow_control_waits",
            "Carriers kept to wait for room to run (concurrency key, rate limit, tenant quota, "
            "tenant suspended or its status stale), by reason.",
            ["reason"],
            registry=r,
        )
        self.reclaims_skipped = Counter(
            "plaita_reclaim_skipped",
            "Reclaimed carriers left alone because their execution's lease is live.",
            registry=r,
        )
        self.resume_latency = Histogram(
            "plaita_resume_latency_seconds",
            "From an event resume carrier being written to its dispatch starting.",
            buckets=RESUME_LATENCY_BUCKETS,
            registry=r,
        )
        self.up = Gauge(
            "plaita_worker_up", "1 while this worker consumes, 0 once it drains.", registry=r
        )
        self.last_heartbeat = Gauge(
            "plaita_worker_heartbeat_timestamp_seconds",
            "When this worker last wrote its registry record (epoch seconds).",
            registry=r,
        )
        self.disk_guard_blocked = Gauge(
            "plaita_disk_guard_blocked",
            "1 while free disk is below --min-free-disk-gib and the worker does not read.",
            registry=r,
        )

    def dispatched(self, outcome: str, disposition: str) -> None:
        self.steps.labels(outcome).inc()
        tally = tally_dispatch(outcome, disposition)
        if tally.failure:
            self.failures.labels(outcome).inc()
        if tally.retry:
            self.retries.inc()
        if tally.lease_conflict:
            self.lease_conflicts.labels(disposition).inc()
        if tally.affinity is not None:
            self.affinity.labels(tally.affinity).inc()

    def crashed(self) -> None:
        self.failures.labels("crashed").inc()

    def dead_lettered(self, reason: str) -> None:
        self.dead_letters.labels(reason).inc()

    def guard_kept(self, reason: str) -> None:
        self.guard_kept_pending.labels(reason).inc()

    def dlq_trimmed(self, count: int) -> None:
        self.dlq_trimmed_entries.inc(count)

    def flow_control_waited(self, reason: str) -> None:
        self.flow_control_waits.labels(reason).inc()

    def reclaim_skipped(self) -> None:
        self.reclaims_skipped.inc()

    def resumed(self, latency_seconds: float) -> None:
        self.resume_latency.observe(max(0.0, latency_seconds))

    def queue_sizes(self, *, length: int, pending: int, dead_letters: int) -> None:
        self.queue.set(length=length, pending=pending, dead_letters=dead_letters)

    def worker_up(self, up: bool) -> None:
        self.up.set(1 if up else 0)

    def heartbeat(self, at_seconds: float) -> None:
        self.last_heartbeat.set(at_seconds)

    def disk_blocked(self, blocked: bool) -> None:
        self.disk_guard_blocked.set(1 if blocked else 0)
