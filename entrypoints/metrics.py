"""Prometheus metrics of a worker (C5), and a no-op twin for ``--metrics-port 0``.

Each ``PrometheusMetrics`` owns its own ``CollectorRegistry`` (never the global one), so a
process, or a test, may hold several. The exporter listens on 127.0.0.1 only: scrape it
through a local agent or a sidecar, it carries no authentication.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger("plaita.worker.metrics")

EXPORTER_ADDRESS = "127.0.0.1"
#: Dispatch outcomes that count as a failure of the execution's work, besides dead letters.
FAILURE_OUTCOMES = frozenset({"failed", "crashed"})
RETRY_OUTCOME = "retry_scheduled"
LEASE_CONFLICT_OUTCOME = "lease_conflict"
DEAD_LETTER_DISPOSITION = "dead_letter"
#: Event publish → resumed dispatch started, in seconds (P4 targets 3 ms p50, 15 ms p99).
RESUME_LATENCY_BUCKETS = (0.001, 0.003, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class WorkerMetrics(Protocol):
    @property
    def enabled(self) -> bool:
        """False for the no-op twin: nobody scrapes, so nothing needs refreshing."""
        ...

    def dispatched(self, outcome: str, disposition: str) -> None:
        """One dispatch returned with ``outcome`` and was settled by ``disposition``."""
        ...

    def crashed(self) -> None:
        """A dispatch raised instead of returning; its carrier stays pending."""
        ...

    def dead_lettered(self, reason: str) -> None:
        """A carrier went to the DLQ; ``reason`` is the guard's."""
        ...

    def guard_kept(self, reason: str) -> None:
        """The guard kept a carrier pending instead of dead-lettering it."""
        ...

    def dlq_trimmed(self, count: int) -> None:
        """The DLQ length cap dropped ``count`` more of the oldest dead letters (W10)."""
        ...

    def reclaim_skipped(self) -> None:
        """A reclaimed carrier was left alone because its execution's lease is live."""
        ...

    def resumed(self, latency_seconds: float) -> None:
        """An event resume began this long after its carrier was written."""
        ...

    def queue_sizes(self, *, length: int, pending: int, dead_letters: int) -> None:
        """The stream's length and pending count and the DLQ's length, just read."""
        ...

    def worker_up(self, up: bool) -> None:
        """1 while the worker consumes, 0 once it drains."""
        ...

    def heartbeat(self, at_seconds: float) -> None:
        """The registry record was written at ``at_seconds`` (epoch)."""
        ...

    def disk_blocked(self, blocked: bool) -> None:
        """The disk guard stopped (or let again) this worker read and claim."""
        ...


class NoMetrics:
    """The no-op twin: every call does nothing."""

    enabled = False

    def dispatched(self, outcome: str, disposition: str) -> None:
        pass

    def crashed(self) -> None:
        pass

    def dead_lettered(self, reason: str) -> None:
        pass

    def guard_kept(self, reason: str) -> None:
        pass

    def dlq_trimmed(self, count: int) -> None:
        pass

    def reclaim_skipped(self) -> None:
        pass

    def resumed(self, latency_seconds: float) -> None:
        pass

    def queue_sizes(self, *, length: int, pending: int, dead_letters: int) -> None:
        pass

    def worker_up(self, up: bool) -> None:
        pass

    def heartbeat(self, at_seconds: float) -> None:
        pass

    def disk_blocked(self, blocked: bool) -> None:
        pass


class PrometheusMetrics:
    """The worker's metrics in a registry of their own; ``serve`` exports them over HTTP."""

    enabled = True

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
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
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def serve(self, port: int) -> int:
        """Start the HTTP exporter on 127.0.0.1:``port`` (0 picks a free port); the port."""
        self._server, self._thread = start_http_server(
            port, addr=EXPORTER_ADDRESS, registry=self.registry
        )
        bound = int(self._server.server_address[1])
        log.info("event=metrics.serving address=%s:%d path=/metrics", EXPORTER_ADDRESS, bound)
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def dispatched(self, outcome: str, disposition: str) -> None:
        self.steps.labels(outcome).inc()
        if outcome in FAILURE_OUTCOMES or disposition == DEAD_LETTER_DISPOSITION:
            self.failures.labels(outcome).inc()
        if outcome == RETRY_OUTCOME:
            self.retries.inc()
        if outcome == LEASE_CONFLICT_OUTCOME:
            self.lease_conflicts.labels(disposition).inc()

    def crashed(self) -> None:
        self.failures.labels("crashed").inc()

    def dead_lettered(self, reason: str) -> None:
        self.dead_letters.labels(reason).inc()

    def guard_kept(self, reason: str) -> None:
        self.guard_kept_pending.labels(reason).inc()

    def dlq_trimmed(self, count: int) -> None:
        self.dlq_trimmed_entries.inc(count)

    def reclaim_skipped(self) -> None:
        self.reclaims_skipped.inc()

    def resumed(self, latency_seconds: float) -> None:
        self.resume_latency.observe(max(0.0, latency_seconds))

    def queue_sizes(self, *, length: int, pending: int, dead_letters: int) -> None:
        self.stream_length.set(length)
        self.stream_pending.set(pending)
        self.dlq_length.set(dead_letters)

    def worker_up(self, up: bool) -> None:
        self.up.set(1 if up else 0)

    def heartbeat(self, at_seconds: float) -> None:
        self.last_heartbeat.set(at_seconds)

    def disk_blocked(self, blocked: bool) -> None:
        self.disk_guard_blocked.set(1 if blocked else 0)
