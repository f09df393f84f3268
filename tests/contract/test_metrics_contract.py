"""The metrics ports (C5): every recorder takes every call of its port; the Prometheus
adapters export exactly the series the operator docs list, with their labels, each in a
registry of its own; the exporter serves a registry over HTTP on the loopback interface.

Run on the Prometheus adapters and on the null objects used when metrics are off.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from plaita.adapters.prometheus.console import PrometheusConsoleMetrics
from plaita.adapters.prometheus.exporter import PrometheusExporter
from plaita.adapters.prometheus.worker import PrometheusWorkerMetrics
from plaita.application.null_objects import NoMetrics, NoMetricsExporter
from plaita.application.ports import (
    ClusterSnapshot,
    ConsoleMetrics,
    MetricsExporter,
    WorkerInstance,
    WorkerMetrics,
)
from plaita.domain.worker_state import WorkerStatus

DOCS = Path(__file__).resolve().parents[2] / "docs"
SERIES = re.compile(r"`(plaita_[a-z_]+)(?:\{([a-z_, ]+)\})?`")


def documented(doc: str, heading: str) -> dict[str, frozenset[str]]:
    """The series (with their label names) in the first cells of the table under ``heading``."""
    section = (DOCS / doc).read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {
        name: frozenset(label.strip() for label in labels.split(",") if label.strip())
        for row in rows
        for name, labels in SERIES.findall(row)
    }


def exported(registry: CollectorRegistry) -> dict[str, frozenset[str]]:
    """Each family by the name scrapers see (counters end in ``_total``), with its labels."""
    series: dict[str, frozenset[str]] = {}
    for family in registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = {label for sample in family.samples for label in sample.labels}
        series[name] = frozenset(labels - {"le"})
    return series


def record_everything(metrics: WorkerMetrics) -> None:
    """One call of every method of the port, so every series has a sample."""
    metrics.dispatched("lease_conflict", "dead_letter")
    metrics.dispatched("retry_scheduled", "ack")
    metrics.dispatched("handed_over", "ack")
    metrics.crashed()
    metrics.dead_lettered("budget_spent")
    metrics.guard_kept("holder_alive")
    metrics.dlq_trimmed(2)
    metrics.reclaim_skipped()
    metrics.flow_control_waited("concurrency")
    metrics.resumed(0.004)
    metrics.queue_sizes(length=5, pending=2, dead_letters=1)
    metrics.worker_up(True)
    metrics.heartbeat(1_760_000_000.0)
    metrics.disk_blocked(False)


def snapshot(*workers: WorkerInstance) -> ClusterSnapshot:
    return ClusterSnapshot(
        stream_length=4,
        pending=1,
        dlq_length=2,
        delayed=3,
        workers=workers,
        now_ms=10_000,
        lag_ms=1_500,
    )


def worker(instance_id: str, status: str = "running", heartbeat_ms: int = 7_000) -> WorkerInstance:
    return WorkerInstance(instance_id, status, heartbeat_ms=heartbeat_ms, started_ms=0)


class WorkerMetricsContract:
    @pytest.fixture
    def metrics(self) -> WorkerMetrics:
        raise NotImplementedError

    def test_every_call_of_the_port_is_taken(self, metrics: WorkerMetrics) -> None:
        record_everything(metrics)
        assert isinstance(metrics.enabled, bool)


class TestPrometheusWorkerMetrics(WorkerMetricsContract):
    @pytest.fixture
    def metrics(self) -> PrometheusWorkerMetrics:
        return PrometheusWorkerMetrics()

    def test_it_exports_the_series_operations_md_lists(
        self, metrics: PrometheusWorkerMetrics
    ) -> None:
        """The names and labels operators alert on must never change by accident."""
        record_everything(metrics)
        assert metrics.enabled
        assert exported(metrics.registry) == documented("operations.md", "## 4. Metrics")

    def test_a_dispatch_is_counted_as_the_domain_tallies_it(
        self, metrics: PrometheusWorkerMetrics
    ) -> None:
        metrics.dispatched("lease_conflict", "dead_letter")
        value = metrics.registry.get_sample_value
        assert value("plaita_steps_total", {"outcome": "lease_conflict"}) == 1
        assert value("plaita_failures_total", {"outcome": "lease_conflict"}) == 1
        assert value("plaita_lease_conflicts_total", {"disposition": "dead_letter"}) == 1
        assert value("plaita_retries_total") == 0

    def test_affinity_outcomes_are_counted_by_action(
        self, metrics: PrometheusWorkerMetrics
    ) -> None:
        metrics.dispatched("handed_over", "ack")
        metrics.dispatched("handed_over", "ack")
        metrics.dispatched("target_stripped", "ack")
        metrics.dispatched("completed", "ack")
        value = metrics.registry.get_sample_value
        assert value("plaita_affinity_total", {"action": "handed_over"}) == 2
        assert value("plaita_affinity_total", {"action": "target_stripped"}) == 1
        assert value("plaita_affinity_total", {"action": "completed"}) is None
        assert value("plaita_failures_total", {"outcome": "handed_over"}) is None

    def test_two_sets_coexist(self) -> None:
        first, second = PrometheusWorkerMetrics(), PrometheusWorkerMetrics()
        first.dispatched("completed", "ack")
        labels = {"outcome": "completed"}
        assert first.registry.get_sample_value("plaita_steps_total", labels) == 1
        assert second.registry.get_sample_value("plaita_steps_total", labels) is None


class TestNoMetrics(WorkerMetricsContract):
    @pytest.fixture
    def metrics(self) -> NoMetrics:
        return NoMetrics()

    def test_it_is_off(self, metrics: NoMetrics) -> None:
        assert not metrics.enabled


class TestPrometheusConsoleMetrics:
    @pytest.fixture
    def metrics(self) -> ConsoleMetrics:
        return PrometheusConsoleMetrics()

    def test_it_exports_the_series_console_md_lists(self, metrics: ConsoleMetrics) -> None:
        metrics.observe(snapshot(worker("w-1")))
        metrics.answered("GET", "/api/v1/queue", 200)
        assert isinstance(metrics, PrometheusConsoleMetrics)
        assert exported(metrics.registry) == documented("console.md", "## Metrics (C5)")

    def test_it_renders_what_it_recorded_and_only_that(self, metrics: ConsoleMetrics) -> None:
        metrics.answered("GET", "/api/v1/queue", 200)
        other = PrometheusConsoleMetrics()

        page = metrics.render().decode()

        assert page.startswith("# HELP")
        assert (
            'plaita_console_requests_total{method="GET",route="/api/v1/queue",status="200"} 1.0'
            in page
        )
        assert "route=" not in other.render().decode()

    def test_every_worker_status_is_exported_and_gone_workers_leave(
        self, metrics: ConsoleMetrics
    ) -> None:
        metrics.observe(snapshot(worker("w-1"), worker("w-2", "draining", heartbeat_ms=9_000)))
        metrics.observe(snapshot(worker("w-2", "draining", heartbeat_ms=9_000)))

        page = metrics.render().decode()

        for status in WorkerStatus:
            assert f'plaita_workers{{status="{status}"}}' in page
        assert 'plaita_workers{status="draining"} 1.0' in page
        assert 'plaita_worker_heartbeat_age_seconds{instance_id="w-2"} 1.0' in page
        assert 'instance_id="w-1"' not in page
        assert "plaita_queue_lag_seconds 1.5" in page


class TestPrometheusExporter:
    async def test_it_serves_its_registry_on_the_loopback_interface(self) -> None:
        metrics = PrometheusWorkerMetrics()
        metrics.dispatched("completed", "ack")
        exporter: MetricsExporter = PrometheusExporter(metrics.registry, port=0)
        port = exporter.serve()
        assert port
        try:
            body = await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            )
        finally:
            exporter.close()
        assert b'plaita_steps_total{outcome="completed"} 1.0' in body
        exporter.close()  # a second close does nothing

    def test_a_port_in_use_is_an_os_error(self) -> None:
        first = PrometheusExporter(CollectorRegistry(), port=0)
        port = first.serve()
        assert port
        try:
            with pytest.raises(OSError):
                PrometheusExporter(CollectorRegistry(), port=port).serve()
        finally:
            first.close()


def test_the_null_exporter_serves_nothing() -> None:
    exporter: MetricsExporter = NoMetricsExporter()
    assert exporter.serve() is None
    exporter.close()
