"""The long-running services and what they carry: the worker (W1-W18), the event filter
(V1-V7), the console (C1-C5), the metrics they record (C5), the registry record (W16), the
disk guard (W18) and the dead-letter alerts (C5)."""

from __future__ import annotations

from typing import Any

from dependency_injector import providers

from plaita.adapters.prometheus.console import PrometheusConsoleMetrics
from plaita.adapters.prometheus.exporter import PrometheusExporter
from plaita.adapters.prometheus.worker import PrometheusWorkerMetrics
from plaita.adapters.webhook.alerts import WebhookAlertSink
from plaita.application.null_objects import NoMetrics, NoMetricsExporter
from plaita.entrypoints.container.use_cases import UseCases
from plaita.entrypoints.disk_guard import DiskGuard
from plaita.entrypoints.event_filter import EventFilterService
from plaita.entrypoints.scheduler import SchedulerService
from plaita.entrypoints.worker import Worker
from plaita.entrypoints.worker_registry import Presence


def _switch(on: object) -> str:
    return "on" if on else "off"


def _console(container: Any, **options: Any) -> Any:
    # Imported when first asked for: the console's modules import this package.
    from plaita.entrypoints.console.app import create_app

    return create_app(container, **options)


def _alert_sink(url: str | None, queue_size: int) -> WebhookAlertSink | None:
    return WebhookAlertSink(url, max_queue=queue_size) if url else None


class Container(UseCases):
    __self__ = providers.Self()

    # --- metrics (C5) ----------------------------------------------------------------------
    #: The console's /metrics: a registry of its own for each console app.
    console_metrics = providers.Factory(PrometheusConsoleMetrics)
    #: Recorded in a registry of their own; ``--metrics-port 0`` records nothing.
    prometheus_metrics = providers.Singleton(PrometheusWorkerMetrics)
    metrics = providers.Selector(
        providers.Callable(_switch, UseCases.config.metrics_port),
        on=prometheus_metrics,
        off=providers.Singleton(NoMetrics),
    )
    #: Served by the worker command, which owns the port.
    metrics_exporter = providers.Selector(
        providers.Callable(_switch, UseCases.config.metrics_port),
        on=providers.Singleton(
            PrometheusExporter,
            prometheus_metrics.provided.registry,
            port=UseCases.config.metrics_port,
        ),
        off=providers.Singleton(NoMetricsExporter),
    )

    # --- the worker process (W1-W18) -------------------------------------------------------
    #: This worker's registry record (W16); none with ``--no-registry``. One per worker: a
    #: record's lifecycle ends with its worker (stopped, then closed for good), so a worker
    #: built again on this container (``plaita.Worker`` started twice on one client, a dev
    #: process's worker) registers under a presence of its own instead of a closed one.
    presence = providers.Selector(
        providers.Callable(_switch, UseCases.config.registry_enabled),
        on=providers.Factory(
            Presence,
            UseCases.registry,
            instance_id=UseCases.config.consumer_name,
            clock=UseCases.clock,
            lease_ttl_ms=UseCases.config.lease_ttl_ms,
            generations=UseCases.generations,
            metrics=metrics,
            outages=UseCases.outages,
        ),
        off=providers.Object(None),
    )
    disk_guard = providers.Singleton(
        DiskGuard,
        min_free_gib=UseCases.config.min_free_disk_gib,
        path=UseCases.config.disk_guard_path,
        poll_seconds=UseCases.config.disk_guard_poll_seconds,
        metrics=metrics,
    )
    #: A webhook for every dead letter; none without ``alert_webhook_url``.
    alerts = providers.Singleton(
        _alert_sink, UseCases.config.alert_webhook_url, UseCases.config.alert_queue_size
    )
    worker = providers.Singleton(
        Worker,
        queue=UseCases.queue,
        process=UseCases.process_task,
        consumer=UseCases.config.consumer_name,
        delay=UseCases.delay_queue,
        clock=UseCases.clock,
        concurrency=UseCases.config.concurrency,
        read_block_ms=UseCases.config.read_block_ms,
        claim_min_idle_ms=UseCases.config.claim_min_idle_ms,
        guard=UseCases.dead_letter_guard,
        presence=presence,
        metrics=metrics,
        disk_guard=disk_guard,
        drain_timeout_seconds=UseCases.config.drain_timeout_seconds,
        alerts=alerts,
        outages=UseCases.outages,
        trim_every_seconds=UseCases.config.stream_trim_interval_seconds,
        sweep_slots=UseCases.sweep_slots,
        slot_sweep_every_seconds=UseCases.config.slot_sweep_interval_seconds,
    )

    # --- the event filter (V1-V7) ----------------------------------------------------------
    #: Each command that runs one adds what is its own: the reconcile round and its period,
    #: the background jobs beside it, the stores to close, a consumer name.
    event_filter = providers.Factory(
        EventFilterService,
        events=UseCases.events,
        filter_event=UseCases.filter_event,
        consumer=UseCases.config.consumer_name,
        read_block_ms=UseCases.config.read_block_ms,
        claim_min_idle_ms=UseCases.config.claim_min_idle_ms,
        outages=UseCases.outages,
    )

    # --- the scheduler (W22) ---------------------------------------------------------------
    scheduler = providers.Factory(
        SchedulerService,
        tick=UseCases.scheduler_tick,
        holder_id=UseCases.config.consumer_name,
        poll_interval_seconds=UseCases.config.scheduler_poll_interval_seconds,
        claim_ttl_ms=UseCases.config.scheduler_claim_ttl_ms,
        grace_ms=UseCases.scheduler_grace_ms,
        outages=UseCases.outages,
    )

    # --- the console (C1-C5) ---------------------------------------------------------------
    #: The console's app on this wiring; its command adds the tokens, the body limit and,
    #: under ``plaita dev``, dev mode.
    console = providers.Factory(_console, __self__)
