"""``plaita worker``: advance executions from the task stream until SIGTERM/SIGINT (C4).

Its flags are settings (each also read from ``PLAITA_*``), apart from ``--flows``, ``--quiet``
and ``--no-registry``; the container assembles the worker from them.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from plaita.domain.affinity import DEFAULT_MAX_HANDOVERS
from plaita.domain.flow_owners import SHARED
from plaita.entrypoints.cli_catalog import SHARED_ROLLBACK, latest_note
from plaita.entrypoints.cli_support import (
    cluster_flag,
    default_retries_option,
    flow_cache_size_option,
    flow_cache_ttl_option,
    import_handler_modules,
    load_flow_file,
    log_generations,
    run_with_container,
    service_redis_url_option,
    set_service_log_level,
    setting_default,
    stop_on_signals,
    warn_fallbacks,
)
from plaita.entrypoints.sdk.client import Client
from plaita.entrypoints.sdk.worker import Worker
from plaita.entrypoints.timeline import LogListener

if TYPE_CHECKING:  # the container is built only when the worker starts
    from plaita.entrypoints.container import Container


@click.command("worker")
@service_redis_url_option
@click.option(
    "--flows",
    "flows_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Register every *.json flow in this folder at start-up, deployment-wide.",
)
@click.option(
    "--handler-modules",
    envvar="PLAITA_HANDLER_MODULES",
    default="",
    help="Comma-separated modules task handlers may come from (env PLAITA_HANDLER_MODULES).",
)
# Unset flags are None, so PLAITA_* (then the Settings default) apply: every process of a pool
# reads the same environment, and the console and CLI compute this worker's generations (W12).
@click.option("--concurrency", type=int, default=None, show_default=setting_default("concurrency"))
@click.option(
    "--queue-name",
    default=None,
    show_default=setting_default("queue_name"),
    help="The task queue (env PLAITA_QUEUE_NAME).",
)
@click.option(
    "--consumer-group",
    default=None,
    show_default=setting_default("consumer_group"),
    help="The consumer group (env PLAITA_CONSUMER_GROUP).",
)
@click.option("--consumer-name", default=None, help="Default: host-pid-random, unique per start.")
@click.option(
    "--read-block-ms",
    type=int,
    default=None,
    show_default=setting_default("read_block_ms"),
    help="How long one read waits; it also bounds how long a stop takes to begin.",
)
@click.option(
    "--claim-min-idle-ms",
    type=int,
    default=None,
    show_default=setting_default("claim_min_idle_ms"),
    help="Reclaim carriers another worker left pending this long (env PLAITA_CLAIM_MIN_IDLE_MS).",
)
@click.option(
    "--lease-ttl-seconds",
    type=float,
    default=None,
    show_default=setting_default("lease_ttl_seconds"),
    help="The execution lease's TTL (env PLAITA_LEASE_TTL_SECONDS); part of the budget "
    "generation, so set it in the environment of every process of the pool.",
)
@click.option(
    "--max-deliveries",
    type=int,
    envvar="PLAITA_MAX_DELIVERIES",
    default=5,
    show_default=True,
    help="Attempts of a step that crash their worker before it is given up: its execution "
    "ends in error and the carrier goes to the dead-letter queue. Skipped redeliveries never "
    "count; a handler's own failures count against its node's retryTimes. Part of the budget "
    "generation: set it in the environment of every process of the pool.",
)
@default_retries_option
@click.option(
    "--dlq-key",
    envvar="PLAITA_DLQ_KEY",
    default=None,
    help="The dead-letter stream (default: the queue's own, NAMESPACE:q:{QUEUE}:dlq).",
)
@click.option(
    "--dlq-max-len",
    type=int,
    envvar="PLAITA_DLQ_MAX_LEN",
    default=10_000,
    show_default=True,
    help="The dead-letter queue's length cap: beyond it the oldest entries are dropped "
    "unreplayed (counted in plaita_dlq_trimmed_total, with a WARNING).",
)
@click.option(
    "--retention-days",
    type=float,
    envvar="PLAITA_RETENTION_DAYS",
    default=7.0,
    show_default=True,
    help="How long a finished execution (completed, failed, cancelled) is kept, then it "
    "expires with everything it wrote; more than 0, fractions allowed.",
)
@click.option(
    "--min-free-disk-gib",
    type=float,
    envvar="PLAITA_MIN_FREE_DISK_GIB",
    default=0.0,
    show_default=True,
    help="Below this much free disk the worker neither reads nor claims; 0 disables.",
)
@click.option(
    "--disk-guard-path",
    envvar="PLAITA_DISK_GUARD_PATH",
    default=".",
    show_default=True,
    help="Where free disk is measured for --min-free-disk-gib.",
)
@click.option(
    "--affinity-max-handovers",
    type=int,
    envvar="PLAITA_AFFINITY_MAX_HANDOVERS",
    default=DEFAULT_MAX_HANDOVERS,
    show_default=True,
    help="How often a carrier started for another worker (--target-instance) is passed on "
    "towards it before its target is dropped and any worker runs it; 0 drops it at once. "
    "Raise it for pools of more workers than this.",
)
@click.option(
    "--no-registry",
    is_flag=True,
    help="Do not register in the worker registry; other workers then never take this one "
    "for a live lease holder, and a lease conflict never acks a carrier.",
)
@click.option(
    "--metrics-port",
    type=int,
    envvar="PLAITA_METRICS_PORT",
    default=0,
    show_default=True,
    help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics; 0 disables.",
)
@click.option(
    "--drain-timeout-seconds",
    type=float,
    envvar="PLAITA_DRAIN_TIMEOUT_SECONDS",
    default=30.0,
    show_default=True,
    help="After SIGTERM/SIGINT, how long to wait for running steps; then exit without "
    "acking them (their carriers stay pending for another worker).",
)
@click.option(
    "--alert-webhook-url",
    envvar="PLAITA_ALERT_WEBHOOK_URL",
    default=None,
    help="POST a JSON alert here for every dead letter (best effort; never slows consuming).",
)
@flow_cache_size_option
@flow_cache_ttl_option
@click.option("--quiet", is_flag=True, help="Log WARNING and above only (default: INFO).")
def worker(
    redis_url: str,
    flows_dir: Path | None,
    handler_modules: str,
    concurrency: int | None,
    queue_name: str | None,
    consumer_group: str | None,
    consumer_name: str | None,
    read_block_ms: int | None,
    claim_min_idle_ms: int | None,
    lease_ttl_seconds: float | None,
    max_deliveries: int,
    default_retries: int,
    dlq_key: str | None,
    dlq_max_len: int,
    retention_days: float,
    min_free_disk_gib: float,
    disk_guard_path: str,
    affinity_max_handovers: int,
    no_registry: bool,
    metrics_port: int,
    drain_timeout_seconds: float,
    alert_webhook_url: str | None,
    flow_cache_size: str | None,
    flow_cache_ttl_seconds: str | None,
    quiet: bool,
) -> None:
    """Advance executions from the task stream until SIGTERM/SIGINT."""
    from plaita.domain.errors import InvalidConfigurationError
    from plaita.domain.partitions import PartitionCountChangedError
    from plaita.entrypoints.settings import worker_settings

    log = logging.getLogger("plaita.worker")
    set_service_log_level(quiet)
    from plaita.entrypoints.container import dlq_key_problems

    try:
        settings, check = worker_settings(
            {
                **cluster_flag(),
                "backend": "redis",
                "redis_url": redis_url,
                "handler_modules": handler_modules,
                "concurrency": concurrency,
                "queue_name": queue_name,
                "consumer_group": consumer_group,
                "consumer_name": consumer_name,
                "read_block_ms": read_block_ms,
                "claim_min_idle_ms": claim_min_idle_ms,
                "lease_ttl_seconds": lease_ttl_seconds,
                "max_deliveries": max_deliveries,
                "default_retries": default_retries,
                "dlq_key": dlq_key,
                "dlq_max_len": dlq_max_len,
                "retention_days": retention_days,
                "min_free_disk_gib": min_free_disk_gib,
                "disk_guard_path": disk_guard_path,
                # Unset unless the flag is given, so PLAITA_REGISTRY_ENABLED=0 works too.
                "registry_enabled": False if no_registry else None,
                "affinity_max_handovers": affinity_max_handovers,
                "metrics_port": metrics_port,
                "drain_timeout_seconds": drain_timeout_seconds,
                "alert_webhook_url": alert_webhook_url,
                "flow_cache_size": flow_cache_size,
                "flow_cache_ttl_seconds": flow_cache_ttl_seconds,
            },
            checks=(dlq_key_problems,),
        )
    except InvalidConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    warn_fallbacks(check.warnings, log)
    flows = [load_flow_file(p) for p in sorted(flows_dir.glob("*.json"))] if flows_dir else []

    async def body(container: Container) -> None:
        import_handler_modules(settings.handler_modules)
        try:
            # Before anything runs: another --partitions than the deployment's, while its
            # layout still holds carriers, is refused (exit 2); a drained one is recorded.
            await container.queue().ensure_group()
        except PartitionCountChangedError as exc:
            raise click.UsageError(f"{type(exc).__name__}: {exc}") from None
        container.listeners.override(lambda: [LogListener()])
        log_generations(log, "worker", container.generations())
        for flow in flows:
            # The worker serves every tenant: its --flows are deployment-wide (ADR 0011).
            registered = await container.flows().register(flow, owner=SHARED)
            done = "registered" if registered.created else "already registered"
            note = latest_note(registered, how=SHARED_ROLLBACK)
            click.echo(
                f"{done} flow {flow.flow_id} version {flow.version} (deployment-wide); {note}",
                err=True,
            )
        # plaita.Worker, as application code embeds it, without the event filter (a service
        # of its own: plaita event-filter).
        worker = Worker(
            Client._on(container, settings),
            handler_modules=settings.handler_modules,
            event_filter=False,
        )
        stop = asyncio.Event()
        try:
            with stop_on_signals(stop):
                await worker.run(stop)
        except InvalidConfigurationError as exc:
            raise click.ClickException(str(exc)) from None

    run_with_container(settings, body)
